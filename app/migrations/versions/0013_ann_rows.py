"""The HNSW index holds only the rows of heavy users (``memories.ann``).

Only users with more than EXACT_SCAN_MAX live memories are searched through the HNSW
index on ``memories.embedding``; every other user is ranked exactly from
``memory_vectors``. Yet every vector written paid the graph insert (~1.9 ms a memory,
85 % of the job worker's Postgres CPU in ``bench.drain``). ``ann`` marks the rows the
index holds: written true for a user who already has such rows, and flipped for all of
a user's rows once, by the worker, when the user passes EXACT_SCAN_MAX
(stores/memories.FLIP_HEAVY). ``memories_user_ann_idx`` finds a user's rows of either
side: whether the user is heavy already, and the rows the heavy search ranks exactly
(``NOT ann``: rows written in a race with the flip).

The column comes with a constant default (no table rewrite); the backfill marks the
rows of users past the limit of this revision (5,000 live memories, as EXACT_SCAN_MAX
was); the partial index is built from those rows alone. Building it and the b-tree
holds writes to ``memories`` while they build. The downgrade builds the full index
again.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

HEAVY_AT = 5_000  # EXACT_SCAN_MAX when this revision was written


def _hnsw(where: str | None) -> None:
    op.create_index(
        "memories_embedding_hnsw_idx",
        "memories",
        ["embedding"],
        postgresql_using="hnsw",
        postgresql_ops={"embedding": "vector_cosine_ops"},
        postgresql_where=None if where is None else sa.text(where),
    )


def upgrade() -> None:
    op.add_column("memories", sa.Column("ann", sa.Boolean, nullable=False, server_default="false"))
    op.drop_index("memories_embedding_hnsw_idx", table_name="memories")
    op.execute(
        "UPDATE memories SET ann = true WHERE user_id IN ("
        " SELECT user_id FROM memories WHERE superseded_by IS NULL"
        f" GROUP BY user_id HAVING count(*) > {HEAVY_AT})"
    )
    op.create_index("memories_user_ann_idx", "memories", ["user_id", "ann"])
    _hnsw("ann")


def downgrade() -> None:
    op.drop_index("memories_embedding_hnsw_idx", table_name="memories")
    op.drop_index("memories_user_ann_idx", table_name="memories")
    op.drop_column("memories", "ann")
    _hnsw(None)

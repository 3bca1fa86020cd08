"""A narrow, half-precision copy of the memory vectors; memories.terms goes.

The exact search of a user's memories (stores/memories.VECTOR_ROUTED) ranked every
row of the user by reading it from ``memories``, whose rows are ~3 KB (text, source,
metadata and a 2 KB float vector stored inline): 350 page reads for a user of 1,000
memories, most of the cost of a /context with retrieval when the user's pages are not
in shared buffers. ``memory_vectors`` holds only what the ranking needs, the vector
as ``halfvec`` (1 KB, 7 rows to a page); the few best are re-ranked by the full
vectors of their ``memories`` rows, read anyway for their text.

``memories.terms`` (every term occurrence of a memory, written with it) has been read
by nothing since the postings (``memory_terms``, 0004) replaced it; the downgrade
rebuilds it from them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import HALFVEC
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

DIM = 512


def upgrade() -> None:
    op.create_table(
        "memory_vectors",
        sa.Column(
            "memory_id",
            sa.BigInteger,
            sa.ForeignKey("memories.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("embedding", HALFVEC(DIM), nullable=False),
    )
    # A user's rows side by side: the backfill writes them in user order.
    op.execute(
        "INSERT INTO memory_vectors (memory_id, user_id, kind, embedding)"
        f" SELECT id, user_id, kind, CAST(embedding AS halfvec({DIM})) FROM memories"
        " WHERE embedding IS NOT NULL ORDER BY user_id, id"
    )
    op.create_index("memory_vectors_user_idx", "memory_vectors", ["user_id", "kind"])
    op.drop_column("memories", "terms")


def downgrade() -> None:
    op.add_column(
        "memories",
        sa.Column("terms", ARRAY(sa.Text), nullable=False, server_default=sa.text("'{}'::text[]")),
    )
    op.execute(
        "UPDATE memories m SET terms = t.terms FROM ("
        " SELECT p.memory_id, array_agg(p.term) AS terms"
        " FROM memory_terms p, generate_series(1, p.tf) GROUP BY p.memory_id) t"
        " WHERE t.memory_id = m.id"
    )
    op.drop_table("memory_vectors")

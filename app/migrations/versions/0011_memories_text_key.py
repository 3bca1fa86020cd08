"""A restatement is found by its wording's key, not by reading every memory of the user.

An add looks for a live memory of the user with the same ``text_key`` (a restatement
confirms it). With only ``memories_user_live_idx`` (user, kind), that read visited every
live memory of the user, and, after the worker wrote their vectors (an update that is
never HOT: the HNSW index covers the column), their dead versions too. Building the
index holds writes to ``memories`` while a b-tree over two columns of the live rows is
built (as 0009's index did).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "memories_user_text_key_idx",
        "memories",
        ["user_id", "text_key"],
        postgresql_where=sa.text("superseded_by IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("memories_user_text_key_idx", table_name="memories")

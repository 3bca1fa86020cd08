"""What a live user turn states, stored with it once.

The context read adds to the task state what the live user turns the packer leaves
out state (a rule, a pinned fact, a next step: ``compression/live_notes.py``). It ran
the rule extractor over every live user turn of the session whenever one of them did
(0.4 ms a turn, a per-process cache too small for many sessions). ``turns.units``
holds those units, written once by the worker when it indexes the turn; NULL (every
row before this revision, and a turn not indexed yet) means not read yet: the read
reads the text itself, as before.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable without a default: no table rewrite.
    op.add_column("turns", sa.Column("units", JSONB))


def downgrade() -> None:
    op.drop_column("turns", "units")

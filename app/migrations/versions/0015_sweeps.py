"""What a background sweep last finished for: the restamp sweep's rules.

The restamp sweep (``app/services/restamp.py``) stores again the units records an
upgrade made stale. A worker queues it at its start unless it finished for the rules
the worker runs (``live_notes.RULES_STAMP``): one row, written by the sweep's last job
with the stamp it swept for. Without it, telling whether any record is stale takes a
walk of every live turn at each worker start.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("stamp", sa.Text, nullable=False),
        sa.Column(
            "finished_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )


def downgrade() -> None:
    op.drop_table("sweeps")

"""The change notice: the last compression's summary, shown until the user speaks.

* ``task_states.notice``: the one-line notice the last compression rendered (in the
  session's language), or null.
* ``task_states.notice_seq``: the session's last turn seq when that compression
  committed; a user turn after it retires the notice.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("task_states", sa.Column("notice", sa.Text))
    op.add_column("task_states", sa.Column("notice_seq", sa.Integer))


def downgrade() -> None:
    op.drop_column("task_states", "notice_seq")
    op.drop_column("task_states", "notice")

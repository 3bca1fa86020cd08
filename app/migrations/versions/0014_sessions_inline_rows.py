"""A session's ids stay in its row, beside its newest user turn's vector.

``sessions.last_user_embedding`` is stored inline (``STORAGE PLAIN``, 2,056 bytes at 512
dimensions, as 0003 stores a memory's), so once the worker has embedded a session's user
turn the row is past Postgres's TOAST threshold (2,032 bytes), and Postgres moves out of
the row every value it can: a session id longer than ~24 bytes (a UUID, 36) then lives in
the TOAST table, and every statement that reads it (a session's summary, the inspector's
and the agents' listings, promotion, the misses and the jobs) pays a TOAST index probe per
row. The same setting as 0012's for memories leaves a row whole up to half a page.

Rows stored before keep their out-of-line values until they are written again with new
values or rewritten (``VACUUM FULL sessions``); reads are correct either way.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

INLINE_UP_TO = 4080  # bytes: half an 8 KB page


def upgrade() -> None:
    op.execute(f"ALTER TABLE sessions SET (toast_tuple_target = {INLINE_UP_TO})")


def downgrade() -> None:
    op.execute("ALTER TABLE sessions RESET (toast_tuple_target)")

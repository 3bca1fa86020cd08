"""A memory's text and metadata stay in its row, beside its vector.

0003 kept the vector inline (``STORAGE PLAIN``: 2,056 bytes at 512 dimensions), so a
memory's row is past Postgres's TOAST threshold (2,032 bytes) once the worker has written
its vector, and Postgres then moved every other value it could out of the row to get
under it: the text, the metadata and the text key of every embedded memory lived in the
TOAST table (measured on the peers benchmark's database: 1,950 of 1,950 rows). Every
search read them back one TOAST index probe at a time (the vector leg, whose 36
candidates are fetched whole: 277 buffers and 0.54 ms with them, 164 and 0.25 ms
without, on one query of that database). ``toast_tuple_target`` 4080 (half a
page) leaves a row whole up to that size; a longer one (a long episode) is still
compressed or moved out, its largest values first.

Rows stored before keep their out-of-line values until they are written again (an
update that changes them, or ``VACUUM FULL memories``, which rewrites every row by the
new rule); reads are correct either way.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

INLINE_UP_TO = 4080  # bytes: half an 8 KB page


def upgrade() -> None:
    op.execute(f"ALTER TABLE memories SET (toast_tuple_target = {INLINE_UP_TO})")


def downgrade() -> None:
    op.execute("ALTER TABLE memories RESET (toast_tuple_target)")

"""BM25 postings read from their index alone.

The lexical leg reads a user's postings of the query's terms through the primary key
(user_id, term, memory_id); their frequency, length and kind were on the heap, where
a user's postings of one term lie on as many pages as there are memories holding it
(one heap page per posting for a user whose data is not cached: 289 page reads for
the 320 postings of a six-term question). With kind, tf and dl carried in the key's
index, the search is an index-only scan of a few leaf pages.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE memory_terms DROP CONSTRAINT memory_terms_pkey,"
        " ADD CONSTRAINT memory_terms_pkey PRIMARY KEY (user_id, term, memory_id)"
        " INCLUDE (kind, tf, dl)"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE memory_terms DROP CONSTRAINT memory_terms_pkey,"
        " ADD CONSTRAINT memory_terms_pkey PRIMARY KEY (user_id, term, memory_id)"
    )

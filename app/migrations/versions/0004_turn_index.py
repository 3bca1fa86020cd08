"""Retrieval at two granularities, and BM25 postings.

* ``memory_terms``: one row per memory and stemmed term (``app.memories.bm25``),
  with the term's frequency in the memory and the memory's length, keyed by
  (user_id, term): the lexical leg reads only the postings of the query's terms.
  Existing memories get theirs here.
* ``memories.turn_seq``: the seq of a single-turn memory (``metadata.granularity =
  'turn'``), indexed with its session, so /context shows an episode hit turn by
  turn and finds the other half of a question/answer pair in one round trip.
* The GIN index on ``memories.terms`` goes: the postings replace it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections import Counter

import sqlalchemy as sa
from alembic import op

from app.memories.bm25 import index_terms

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BATCH = 1000


def upgrade() -> None:
    op.create_table(
        "memory_terms",
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("term", sa.Text, nullable=False),
        sa.Column(
            "memory_id",
            sa.BigInteger,
            sa.ForeignKey("memories.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("tf", sa.Integer, nullable=False),
        sa.Column("dl", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "term", "memory_id"),
    )
    op.create_index("memory_terms_memory_idx", "memory_terms", ["memory_id"])
    op.add_column("memories", sa.Column("turn_seq", sa.Integer))
    op.create_index(
        "memories_turn_idx",
        "memories",
        ["session_id", "turn_seq"],
        postgresql_where=sa.text("turn_seq IS NOT NULL"),
    )
    # Lexical search reads the postings now; the array index only slowed writes.
    op.drop_index("memories_terms_idx", table_name="memories")
    bind = op.get_bind()
    last = 0
    while True:
        rows = bind.execute(
            sa.text(
                "SELECT id, user_id, kind, text FROM memories WHERE id > :last ORDER BY id LIMIT :n"
            ),
            {"last": last, "n": BATCH},
        ).all()
        if not rows:
            break
        for row in rows:
            terms = index_terms(row.text)
            counts = Counter(terms)
            bind.execute(
                sa.text(
                    "INSERT INTO memory_terms (user_id, term, memory_id, kind, tf, dl)"
                    " SELECT :user_id, x.term, :id, :kind, x.tf, :dl"
                    " FROM unnest(CAST(:terms AS text[]), CAST(:tfs AS integer[])) AS x(term, tf)"
                ),
                {
                    "user_id": row.user_id,
                    "id": row.id,
                    "kind": row.kind,
                    "terms": list(counts),
                    "tfs": list(counts.values()),
                    "dl": max(1, len(terms)),
                },
            )
        last = rows[-1].id


def downgrade() -> None:
    op.create_index("memories_terms_idx", "memories", ["terms"], postgresql_using="gin")
    op.drop_index("memories_turn_idx", table_name="memories")
    op.drop_column("memories", "turn_seq")
    op.drop_table("memory_terms")

"""A memory's values stay in its row once its vector is written (migration 0012).

The vector is stored inline (``STORAGE PLAIN``, 2 KB at 512 dimensions), which puts an
embedded memory's row past Postgres's TOAST threshold; without 0012's
``toast_tuple_target`` Postgres moved the text, the metadata and the text key of every
embedded memory out of the row, and every search read them back from the TOAST table.
"""

from __future__ import annotations

import random

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.memories.bm25 import index_terms
from app.memories.vectors import l2_normalize
from app.stores import memories as repo
from app.stores import sessions
from app.stores.tables import EMBEDDING_DIM

MODEL = "hash-ngram-v1"

# Each memory's values stored out of its row (a TOAST chunk id: not NULL).
OUT_OF_LINE = text("""
    SELECT id, pg_column_toast_chunk_id(text) IS NOT NULL AS text_out,
           pg_column_toast_chunk_id(metadata) IS NOT NULL AS metadata_out,
           pg_column_toast_chunk_id(text_key) IS NOT NULL AS key_out,
           length(text) AS length
    FROM memories ORDER BY id
""")


async def test_an_embedded_memory_keeps_its_text_and_metadata_in_its_row(
    engine: AsyncEngine,
) -> None:
    rng = random.Random(12)
    long_text = " ".join(f"word{rng.randrange(10**6)}" for _ in range(1_500))  # ~16 KB
    texts = ["prefers an aisle seat", "allergic to peanuts, carries an epipen", long_text]
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="inline")
        ids = [
            await repo.insert_memory(
                conn,
                tenant="default",
                user_pk=user_pk,
                kind="fact",
                text_=body,
                text_key=body[:64],
                pinned=False,
                ttl_days=None,
                source={"api": True},
                metadata={"topic": "travel", "lang": "en", "note": "x" * 40},
                terms=index_terms(body),
                embedding=None,  # as an add stores it: the worker writes the vector
                model=None,
            )
            for body in texts
        ]
        await repo.set_embeddings(
            conn,
            tenant="default",
            embeddings=[
                (mid, l2_normalize([rng.gauss(0, 1) for _ in range(EMBEDDING_DIM)])) for mid in ids
            ],
            model=MODEL,
        )
    async with engine.connect() as conn:
        rows = list(await conn.execute(OUT_OF_LINE))
        stored = [r.text for r in await conn.execute(text("SELECT text FROM memories ORDER BY id"))]
    assert [r.id for r in rows] == ids
    short, other, long_ = rows
    # The ordinary memories: whole in their rows (before 0012: all three values out).
    assert not (short.text_out or short.metadata_out or short.key_out)
    assert not (other.text_out or other.metadata_out or other.key_out)
    # A row that cannot fit in half a page still sheds its largest value, and reads whole.
    assert long_.text_out
    assert stored == texts

"""The lexical leg's scores are Okapi BM25 as ``stores/memories.LEXICAL`` defines it,
recomputed here in Python from the user's postings: the statement may be rewritten for
speed, never change what it ranks."""

from __future__ import annotations

import math
import random
from collections import Counter

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.memories.bm25 import search_terms
from app.services.auth import DEFAULT_TENANT
from app.stores import memories as repo
from app.stores import sessions
from app.stores.engine import autocommit, driver_connection

WORDS = "aisle seat flight window tea milk ferry harbour invoice refund booking hotel".split()


def bm25(postings: list[tuple[int, str, int, int]], live: int, k: int) -> list[tuple[int, float]]:
    """BM25 over (memory, term, tf, dl) postings of the query's terms: df per term, N the
    live memories (at least df), the average length over the memories that matched;
    the best ``k``, by score then id."""
    df = Counter(term for _, term, _, _ in postings)
    lengths = {memory: dl for memory, _, _, dl in postings}
    avgdl = max(sum(lengths.values()) / len(lengths), 1.0)
    k1, b = repo.BM25_K1, repo.BM25_B
    scores: dict[int, float] = {}
    for memory, term, tf, dl in postings:
        n = float(df[term])
        idf = math.log(1 + (max(live, n) - n + 0.5) / (n + 0.5))
        part = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
        scores[memory] = scores.get(memory, 0.0) + part
    return sorted(scores.items(), key=lambda s: (-round(s[1], 9), s[0]))[:k]


async def test_the_lexical_leg_scores_bm25_over_the_users_postings(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """Memories of different lengths, repeated terms, two kinds; some superseded or
    expired (scored, then left out); another user's postings beside them."""
    rng = random.Random(13)
    for user in ("u-1", "u-2"):
        for i in range(60):
            words = rng.choices(WORDS, k=rng.randint(1, 14))
            r = await client.post(
                f"/v1/users/{user}/memories",
                json={"text": " ".join(words), "kind": "fact" if i % 3 else "preference"},
            )
            assert r.status_code == 201, r.text
    async with autocommit(engine) as conn:
        user_pk = await sessions.user_pk_on_driver(
            await driver_connection(conn), tenant=DEFAULT_TENANT, user="u-1"
        )
        assert user_pk is not None
        found_ids = await conn.execute(
            text("SELECT id FROM memories WHERE user_id = :u ORDER BY id"), {"u": user_pk}
        )
        ids = found_ids.scalars().all()
        await conn.execute(
            text("UPDATE memories SET superseded_by = :by WHERE id = ANY(:ids)"),
            {"by": ids[-1], "ids": ids[0:6]},
        )
        await conn.execute(
            text("UPDATE memories SET expires_at = now() - interval '1 day' WHERE id = ANY(:ids)"),
            {"ids": ids[6:10]},
        )
        gone = set(ids[:10])
        db = await driver_connection(conn)
        repeated = max(
            await db.fetch("SELECT tf FROM memory_terms WHERE user_id = $1", user_pk),
            key=lambda r: r["tf"],
        )
        assert repeated["tf"] > 1
        for query in ("aisle seat", "tea milk ferry window", "refund refund invoice", "harbour"):
            terms = search_terms(query)
            for kind in (None, "fact"):
                postings = await db.fetch(
                    "SELECT memory_id, term, tf, dl FROM memory_terms"
                    " WHERE user_id = $1 AND term = ANY($2) AND ($3::text IS NULL OR kind = $3)",
                    user_pk,
                    terms,
                    kind,
                )
                live = await db.fetchval(
                    "SELECT count(*) FROM memories WHERE user_id = $1 AND superseded_by IS NULL"
                    " AND ($2::text IS NULL OR kind = $2)",
                    user_pk,
                    kind,
                )
                expected = [
                    s for s in bm25([tuple(p) for p in postings], live, k=200) if s[0] not in gone
                ][:20]
                found = await repo.lexical_search(db, user_pk=user_pk, terms=terms, k=20, kind=kind)
                assert len(found) >= 10, (query, kind)
                assert [m.id for m in found] == [mid for mid, _ in expected], (query, kind)
                for m, (_, score) in zip(found, expected, strict=True):
                    assert math.isclose(m.score or 0.0, score, rel_tol=1e-12), (query, kind)

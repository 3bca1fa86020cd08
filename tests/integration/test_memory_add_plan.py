"""An add looks for a restatement of its memory (same user, same wording's key) by that
key, not by reading every live memory of the user.

The look-up (``ADD_MEMORY``'s ``existing``) ran through the (user, kind) index and
filtered on the key: one heap visit per live memory of the user, and two once the
worker had written their vectors (that update is never HOT: the HNSW index covers the
column, so the old version stays in the indexes until a vacuum). On the peers' workload
that was most of the Postgres CPU of an add while the worker ran."""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.jobs import JobKind
from app.memories.bm25 import index_terms
from app.services.memories import EMBED_JOB_KEY_PREFIX, add_memory, text_key
from app.stores import memories as repo
from app.stores import queue
from app.stores.engine import autocommit, driver_connection
from tests.integration.test_memory_vectors import WORDS, unit

MEMORIES = 200


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in nodes(child))]


async def restatement_lookup(engine: AsyncEngine, memory: repo.MemoryToAdd) -> dict[str, Any]:
    """The plan node of ``existing`` when ``memory`` is added (EXPLAIN ANALYZE: it is)."""
    async with autocommit(engine) as conn:
        db = await driver_connection(conn)
        sql, args = repo.ADD_MEMORY_ON_DRIVER[0], memory.arguments()
        plan = await db.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
    [existing] = [n for n in nodes(plan[0]["Plan"]) if n.get("Subplan Name") == "CTE existing"]
    return existing


def to_add(user: str, wording: str) -> repo.MemoryToAdd:
    return repo.MemoryToAdd(
        tenant="default",
        user=user,
        kind="fact",
        text=wording,
        text_key=text_key(wording),
        pinned=False,
        ttl_days=None,
        source={},
        metadata={},
        terms=index_terms(wording),
        embed_job=queue.JobWanted(kind=JobKind.EMBED_MEMORIES, max_attempts=5),
        embed_key_prefix=EMBED_JOB_KEY_PREFIX,
    )


async def test_an_add_finds_a_restatement_by_its_key_not_by_every_memory(
    engine: AsyncEngine,
) -> None:
    rng = random.Random(11)
    ids = []
    async with autocommit(engine) as conn:
        for i in range(MEMORIES):
            added = await add_memory(
                conn,
                tenant="default",
                user="heavy",
                text=f"{rng.choice(WORDS)} {rng.choice(WORDS)} fact {i}",
                kind="fact",
                pinned=False,
                ttl_days=None,
                metadata={},
                source={},
                max_attempts=5,
            )
            ids.append(added.memory.id)
    # What the worker does next: every memory's vector written (an old version each).
    async with engine.begin() as conn:
        await repo.set_embeddings(
            conn, tenant="default", embeddings=[(i, unit(rng)) for i in ids], model="m"
        )
    async with autocommit(engine) as conn:
        await conn.execute(text("ANALYZE memories"))  # what autovacuum does as a table grows

    new = await restatement_lookup(engine, to_add("heavy", "a wording never seen before"))
    again = await restatement_lookup(engine, to_add("heavy", "a wording never seen before"))

    assert new["Actual Rows"] == 0 and again["Actual Rows"] == 1  # the restatement is found
    for found in (new, again):
        visited = found["Shared Hit Blocks"] + found["Shared Read Blocks"]
        assert visited < 20, visited  # index pages and the one row; was ~2 per memory
        assert all(n.get("Rows Removed by Filter", 0) == 0 for n in nodes(found))

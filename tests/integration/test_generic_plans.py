"""The hot reads keep reading one session and one user after the tables grew.

asyncpg prepares each statement once per pool connection, and after five runs
Postgres may switch it to a generic plan, costed for the table sizes of that
moment and kept on the connection while the tables grow (until an ANALYZE). On a
fresh database (a handful of rows) such a plan must not be one that reads every
user's rows: each test runs a statement more than five times for a small user,
lets other users' rows arrive, and reads the plan the connection then executes.
"""

from __future__ import annotations

import random

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.jobs import JobKind
from app.memories.bm25 import search_terms
from app.stores import memories as repo
from app.stores import queue, sessions
from app.stores.context import read_context
from app.stores.engine import autocommit, driver_connection
from tests.integration.test_memory_vectors import WORDS, add_notes, buffers

# More runs than Postgres waits before it considers a generic plan.
RUNS = 8
OTHERS = 600


async def test_the_context_read_of_a_session_reads_its_user_not_every_memory(
    engine: AsyncEngine,
) -> None:
    """Whether the session's user has memories was answered by hashing every live
    memory of every user, once the plan was made while there were a handful."""
    rng = random.Random(3)
    await add_notes(engine, "small", 2, rng)
    async with engine.begin() as conn:
        await sessions.create_session(conn, tenant="default", session="s-small", user="small")
        await sessions.create_session(conn, tenant="default", session="s-none", user="none")
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        for _ in range(RUNS):
            small = await read_context(db, tenant="default", session="s-small", limit=64, offset=0)
            assert small is not None and small["has_memories"] is True
        await add_notes(engine, "large", OTHERS, rng)
        head = await read_context(db, tenant="default", session="s-none", limit=64, offset=0)
        assert head is not None and head["has_memories"] is False
        read, _ = await buffers(db, "AS has_memories", "default", "s-none", 64, 0, 400)
    assert read < 40, read  # a few index pages per table, never the 600 memories


async def test_a_lexical_search_fetches_its_hits_by_key_after_the_table_grew(
    engine: AsyncEngine,
) -> None:
    """The BM25 hits were joined to the memories by a scan of every live memory per hit."""
    rng = random.Random(5)
    await add_notes(engine, "before", 50, rng)
    user_pk = await add_notes(engine, "small", 20, rng)
    terms = search_terms(" ".join(WORDS))
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        for _ in range(RUNS):
            assert len(await repo.lexical_search(db, user_pk=user_pk, terms=terms, k=20)) == 20
        await add_notes(engine, "large", OTHERS, rng)
        assert len(await repo.lexical_search(db, user_pk=user_pk, terms=terms, k=20)) == 20
        read, _ = await buffers(db, "df AS MATERIALIZED", user_pk, terms, None, 20)
    assert read < 150, read  # 20 hits by key (3 pages each) and the postings


async def test_a_batch_claim_keeps_plans_made_for_its_values(engine: AsyncEngine) -> None:
    """A worker's batch claim, generic once made on a fresh database, matched every job
    of the tenant against every picked one (9-21 ms instead of 0.7 with 1,200 jobs)."""

    async def enqueue(count: int) -> None:
        async with engine.begin() as conn:
            for _ in range(count):
                await queue.enqueue(
                    conn,
                    tenant_id="default",
                    session_id=None,
                    kind=JobKind.EMBED_MEMORIES,
                    max_attempts=3,
                )

    async with autocommit(engine) as conn:
        db = await driver_connection(conn)
        for _ in range(RUNS):
            await enqueue(3)
            first = await queue.claim(conn, worker="w", lease_s=30)
            assert first is not None
            more = await queue.claim_more(conn, like=first, n=64, worker="w", lease_s=30)
            assert len(more) == 2
            done = [first.id, *(j.id for j in more)]
            assert await queue.complete_all(conn, job_ids=done, worker="w") == set(done)
        await enqueue(OTHERS)
        first = await queue.claim(conn, worker="w", lease_s=30)
        assert first is not None
        assert len(await queue.claim_more(conn, like=first, n=64, worker="w", lease_s=30)) == 64
        [generic] = [
            r["generic_plans"]
            for r in await db.fetch("SELECT statement, generic_plans FROM pg_prepared_statements")
            if "fence AS MATERIALIZED" in r["statement"]
        ]
    assert generic == 0  # planned for each execution's values


async def test_a_claim_walks_the_runnable_index_not_every_waiting_job(engine: AsyncEngine) -> None:
    """With 10,000 jobs waiting, a claim sorted every runnable job (a scan of the queue and
    its sort, for each claim of each worker); it reads the first entries of the index of
    waiting jobs instead, in the queue's order: priority, then due time; and, once they
    have waited past the aging bound, those of the index of waiting jobs in due order."""
    async with engine.begin() as conn:
        await conn.execute(
            text("""
                INSERT INTO jobs (tenant_id, kind, max_attempts, priority, run_after)
                SELECT 'default', 'embed_memories', 3, 0, now() - make_interval(secs => 10001 - i)
                FROM generate_series(1, 10000) AS i
            """)
        )
        urgent = await queue.enqueue(
            conn, tenant_id="default", session_id=None, kind=JobKind.COMPRESS, max_attempts=3
        )
        await conn.execute(text("ANALYZE jobs"))
    never = 10.0**6  # no job has waited that long: the priority decides
    async with autocommit(engine) as conn:
        db = await driver_connection(conn)
        claimed = [
            await queue.claim(conn, worker="w", lease_s=30, aging_s=never) for _ in range(RUNS)
        ]
        assert claimed[0] is not None and claimed[0].id == urgent
        oldest = [j.id for j in claimed[1:] if j is not None]
        assert oldest == list(range(1, RUNS))  # the longest due first
        read, _ = await buffers(db, "aged AS MATERIALIZED", never, "w", 30)  # claims job RUNS
        assert read < 40, read  # the head of the index (166 when it sorted), not the 10,000
        await queue.enqueue(
            conn, tenant_id="default", session_id=None, kind=JobKind.COMPRESS, max_attempts=3
        )
        # Every embedding job has waited past 60 s: the oldest goes before the compression.
        aged = [await queue.claim(conn, worker="w", lease_s=30, aging_s=60) for _ in range(RUNS)]
        assert [j.id for j in aged if j is not None] == list(range(RUNS + 1, 2 * RUNS + 1))
        read, _ = await buffers(db, "aged AS MATERIALIZED", 60.0, "w", 30)
    assert read < 40, read

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
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.jobs import JobKind
from app.memories.bm25 import search_terms
from app.stores import memories as repo
from app.stores import queue, sessions
from app.stores.context import read_context
from app.stores.engine import autocommit, driver_connection
from tests.integration.test_memory_vectors import (
    MODEL,
    WORDS,
    add_notes,
    buffers,
    literal,
    unit,
)

# More runs than Postgres waits before it considers a generic plan.
RUNS = 8
OTHERS = 600


@pytest.fixture(autouse=True)
async def statistics_only_from_the_tests(engine: AsyncEngine) -> None:
    """Autovacuum off on every table of the test's database: the planner sees the
    statistics of the ANALYZEs a test runs, or none. Autovacuum visits a new database
    within its naptime (a minute) and analyzes a table a test filled; on a loaded machine
    a test lasts long enough for that to happen mid-test, and the plans it checks are
    then made for other statistics than the ones it set up (a database "never analyzed"
    was, at load 10)."""
    async with engine.begin() as conn:
        tables = await conn.execute(
            text(
                "SELECT oid::regclass::text FROM pg_class WHERE relkind = 'r' AND relnamespace"
                " = 'public'::regnamespace"
            )
        )
        for (table,) in tables.all():
            await conn.execute(text(f"ALTER TABLE {table} SET (autovacuum_enabled = off)"))


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
        read, _ = await buffers(db, "avgdl AS MATERIALIZED", user_pk, terms, None, 20)
        plan = await executed_plan(db, repo.LEXICAL, user_pk, terms, None, 20)
    assert unbounded_scans(plan) == []
    # 20 hits by key (3 pages each) and the postings, read three times (an index page or
    # two per term each time and, on a table never vacuumed, a heap page per posting);
    # a scan of the other users' postings would read hundreds more.
    assert read < 220, read


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


async def routed_statements(db: asyncpg.Connection) -> dict[str, tuple[int, int]]:
    """(generic plans, custom plans) of the routed vector statements this connection
    prepared, by name: young (with its plan fence) or settled."""
    found: dict[str, tuple[int, int]] = {}
    for r in await db.fetch(
        "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
    ):
        if r["statement"] in (repo.VECTOR_ROUTED, repo.VECTOR_ROUTED_YOUNG):
            name = "young" if r["statement"] == repo.VECTOR_ROUTED_YOUNG else "settled"
            found[name] = (r["generic_plans"], r["custom_plans"])
    return found


async def searched_after_growth(
    engine: AsyncEngine, db: asyncpg.Connection, user_pk: int, rng: random.Random
) -> int:
    """Search ``user_pk`` RUNS + 1 times, then let the tables triple (no ANALYZE): the
    buffers the connection's plan of the settled routed statement then reads for it
    (checked against the exact ranking)."""
    query = unit(rng)
    for _ in range(RUNS + 1):
        found = await repo.vector_search(db, user_pk=user_pk, query=query, model=MODEL, k=10)
        assert len(found) == 10
    await add_notes(engine, "large", 2 * repo.SETTLED_ROWS, rng)
    found = await repo.vector_search(db, user_pk=user_pk, query=query, model=MODEL, k=10)
    exact = await db.fetch(repo.VECTOR_EXACT, user_pk, query, MODEL, None, 10)
    assert [r.id for r in found] == [r["id"] for r in exact]
    generic, custom = (await routed_statements(db))["settled"]
    assert (custom, generic) == (5, RUNS + 2 - 5)  # one plan, made once, run since
    plan = await executed_plan(
        db, repo.VECTOR_ROUTED, user_pk, query, MODEL, None, 10, repo.EXACT_SCAN_MAX
    )
    assert unbounded_scans(plan) == []
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


async def executed_plan(db: asyncpg.Connection, statement: str, *args: Any) -> dict[str, Any]:
    """The plan (EXPLAIN ANALYZE, BUFFERS) of the statement ``db`` prepared for
    ``statement``, executed with ``args``: the plan that connection runs."""
    [prepared] = [
        r["name"]
        for r in await db.fetch("SELECT name, statement FROM pg_prepared_statements")
        if r["statement"] == statement
    ]
    plan = await db.fetch(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {prepared}"
        f"({', '.join(literal(a) for a in args)})"
    )
    [tree] = plan[0][0]
    return dict(tree["Plan"])


def unbounded_scans(node: dict[str, Any]) -> list[str]:
    """The scans of memories and memory_vectors in a plan that no index condition bounds
    (a sequential scan, or a whole index read), read as the plan's node types."""
    found = []
    table = node.get("Relation Name") or node.get("Index Name", "")
    if table.startswith("memor") and node["Node Type"] != "Bitmap Heap Scan":
        if "Index Cond" not in node:
            found.append(f"{node['Node Type']} on {table}")
    for child in node.get("Plans", []):
        found += unbounded_scans(child)
    return found


async def test_a_database_analyzed_with_enough_users_plans_the_vector_search_once(
    engine: AsyncEngine,
) -> None:
    """Once the statistics count enough rows of enough users, a connection searches with
    the routed statement that has no plan fence: Postgres makes one generic plan for it
    (no planning per search), costed for those statistics, and that plan still reads a
    user's rows through the indexes after the tables tripled without an ANALYZE."""
    rng = random.Random(13)
    for u in range(repo.SETTLED_USERS):
        user_pk = await add_notes(engine, f"u{u}", repo.SETTLED_ROWS // repo.SETTLED_USERS, rng)
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        await db.execute("ANALYZE memories; ANALYZE memory_vectors")  # as autovacuum would
        read = await searched_after_growth(engine, db, user_pk, rng)
    assert read < 60, read  # the user's 25 rows through the indexes, not the 1,500


async def test_a_database_never_analyzed_plans_the_vector_search_once_past_a_few_pages(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before any ANALYZE the planner assumes a user holds a small share of the rows: once
    both tables are SETTLED_PAGES long, the generic plan reads through the indexes, and
    keeps doing so as they grow. Shorter, the memories were read by a sequential scan."""
    monkeypatch.setattr(repo, "SETTLED_CHECK_S", 0.0)  # look at the statistics every search
    rng = random.Random(29)
    user_pk = await add_notes(engine, "small", 10, rng)
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        await repo.vector_search(db, user_pk=user_pk, query=unit(rng), model=MODEL, k=10)
        assert await routed_statements(db) == {"young": (0, 1)}
        for u in range(repo.SETTLED_USERS):
            await add_notes(engine, f"u{u}", repo.SETTLED_ROWS // repo.SETTLED_USERS, rng)
        [never] = await db.fetch(
            "SELECT count(*) FILTER (WHERE reltuples < 0) = 2 FROM pg_class"
            " WHERE relname IN ('memories', 'memory_vectors')"
        )
        assert never[0]
        read = await searched_after_growth(engine, db, user_pk, rng)
    assert read < 60, read


async def test_statistics_that_turn_young_bring_the_plan_fence_back(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database emptied (and analyzed) after it settled: the connection goes back to the
    fenced statement, so no generic plan of the emptied tables serves their refill."""
    monkeypatch.setattr(repo, "SETTLED_CHECK_S", 0.0)
    rng = random.Random(23)
    for u in range(repo.SETTLED_USERS):
        user_pk = await add_notes(engine, f"u{u}", repo.SETTLED_ROWS // repo.SETTLED_USERS, rng)
    query = unit(rng)
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        await db.execute("ANALYZE memories; ANALYZE memory_vectors")
        await repo.vector_search(db, user_pk=user_pk, query=query, model=MODEL, k=10)
        await db.execute("DELETE FROM memories WHERE user_id <> $1", user_pk)
        await db.execute("ANALYZE memories; ANALYZE memory_vectors")
        found = await repo.vector_search(db, user_pk=user_pk, query=query, model=MODEL, k=10)
        assert len(found) == 10
        assert await routed_statements(db) == {"settled": (0, 1), "young": (0, 1)}


async def test_statistics_of_one_user_keep_the_plan_fence(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A generic plan costed while one user held every row reads whole tables (the plan
    for that user's share), for every user that comes later."""
    monkeypatch.setattr(repo, "SETTLED_CHECK_S", 0.0)
    rng = random.Random(17)
    await add_notes(engine, "one", repo.SETTLED_ROWS, rng)
    small = await add_notes(engine, "small", 4, rng)
    query = unit(rng)
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        await db.execute("ANALYZE memories; ANALYZE memory_vectors")
        for _ in range(RUNS):
            found = await repo.vector_search(db, user_pk=small, query=query, model=MODEL, k=10)
            assert len(found) == 4
        assert await routed_statements(db) == {"young": (0, RUNS)}
        read, _ = await buffers(
            db, "near AS MATERIALIZED", small, query, MODEL, None, 10, repo.EXACT_SCAN_MAX
        )
    assert read < 20, read  # the small user's rows


async def test_a_young_connection_looks_at_the_statistics_once_a_while(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statistics are read on a connection's first search, then not again before
    SETTLED_CHECK_S: a database that never settles (a few users) pays one round trip a
    while, not one a search."""
    rng = random.Random(19)
    user_pk = await add_notes(engine, "few", 8, rng)
    query = unit(rng)
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        for _ in range(3):
            await repo.vector_search(db, user_pk=user_pk, query=query, model=MODEL, k=10)
        monkeypatch.setattr(repo, "SETTLED_CHECK_S", 0.0)
        await repo.vector_search(db, user_pk=user_pk, query=query, model=MODEL, k=10)
        looked = [
            r["runs"]
            for r in await db.fetch(
                "SELECT statement, generic_plans + custom_plans AS runs FROM pg_prepared_statements"
            )
            if r["statement"] == repo.SETTLED_STATISTICS
        ]
    assert looked == [2]

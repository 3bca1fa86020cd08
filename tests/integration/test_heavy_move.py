"""A heavy user's move into the HNSW index runs in short batches (``memory_jobs.move_heavy``).

The move of a user's rows once past EXACT_SCAN_MAX holds each row it moves until it
commits; in one transaction it held all of them for the whole move (~10 s on a user of
5,000 rows), and every write to one of them waited that long. Batches of FLIP_BATCH rows,
each in its own transaction, hold one batch at a time; a move cut short is finished by
the user's next; the search answers the same before, during and after. EXACT_SCAN_MAX is
30 and FLIP_BATCH 10 here, so that a move is a few batches.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.config import Settings
from app.services.memory_jobs import move_heavy
from app.stores import memories as repo
from app.stores import sessions
from app.stores.engine import driver_connection
from tests.integration.test_ann_rows import (
    HEAVY_AT,
    ann_of,
    assert_searches_exactly,
    near,
    notes,
    plan_of,
)
from tests.integration.test_index_batches import Recording, index_worker, talk
from tests.integration.test_memory_vectors import MODEL, add, unit

BATCH = 10
MOVING = repo.FLIP_BATCH  # rows outside the index that mean a move under way (the SQL's)

IDS = text("SELECT id FROM memories WHERE user_id = :u")
# The user's rows no other transaction holds: those a SKIP LOCKED read of them takes.
UNLOCKED = text("SELECT id FROM memories WHERE user_id = :u FOR NO KEY UPDATE SKIP LOCKED")
# This database's backends waiting for a lock, and the backends they wait for.
WAITING = text("""
    SELECT l.pid, pg_blocking_pids(l.pid) AS blockers
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE NOT l.granted AND a.datname = current_database()
""")


@pytest.fixture(autouse=True)
def small_move(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repo, "EXACT_SCAN_MAX", HEAVY_AT)
    monkeypatch.setattr(repo, "FLIP_BATCH", BATCH)


class Paused:
    """The move of ``user_pk``, started, with ``repo.flip_heavy`` stopped after the statement
    of the batches named, before their transaction commits, until the test lets it go;
    records each batch's rows moved and backend pid."""

    def __init__(
        self, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, user_pk: int, at: set[int]
    ) -> None:
        self.at = at
        self.batches: list[int] = []
        self.pids: list[int] = []
        self.paused = asyncio.Event()
        self.go_on = asyncio.Event()
        flip: Callable[..., Awaitable[int]] = repo.flip_heavy

        async def paused(conn: AsyncConnection, **kw: Any) -> int:
            moved = await flip(conn, **kw)
            self.batches.append(moved)
            db = await driver_connection(conn)
            self.pids.append(await db.fetchval("SELECT pg_backend_pid()"))
            if len(self.batches) in self.at:
                self.go_on.clear()
                self.paused.set()
                await self.go_on.wait()
            return moved

        monkeypatch.setattr(repo, "flip_heavy", paused)
        self.move = asyncio.create_task(move_heavy(engine, tenant="default", user_pks=[user_pk]))

    async def reached(self) -> None:
        await asyncio.wait_for(self.paused.wait(), 60)
        self.paused.clear()

    def resume(self) -> None:
        self.go_on.set()


@pytest.fixture
async def paused_move(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[int, set[int]], Paused]]:
    """Starts a paused move; a move a failed test left waiting is let go and cancelled."""
    started: list[Paused] = []

    def start(user_pk: int, at: set[int]) -> Paused:
        started.append(Paused(engine, monkeypatch, user_pk, at))
        return started[-1]

    yield start
    for pause in started:
        pause.at = set()
        pause.resume()
        pause.move.cancel()
        await asyncio.gather(pause.move, return_exceptions=True)


async def searches(engine: AsyncEngine, user_pk: int, queries: list[list[float]]) -> list[Any]:
    """(id, score) of every result of each query, k 5 and 12, on one pool connection."""
    found = []
    async with engine.connect() as conn:
        for query in queries:
            for k in (5, 12):
                rows = await repo.vector_search(
                    conn, user_pk=user_pk, query=query, model=MODEL, k=k
                )
                found.append([(m.id, m.score) for m in rows])
    return found


async def held(engine: AsyncEngine, user_pk: int) -> set[int]:
    """The user's rows another transaction holds."""
    async with engine.connect() as conn:
        everyone = set((await conn.execute(IDS, {"u": user_pk})).scalars())
        free = set((await conn.execute(UNLOCKED, {"u": user_pk})).scalars())
        await conn.rollback()  # (the rows it took)
    return everyone - free


async def waiting(engine: AsyncEngine) -> list[Any]:
    """The backends waiting for a lock, once one does."""
    async with engine.connect() as conn:
        for _ in range(1000):
            rows = list((await conn.execute(WAITING)).all())
            if rows:
                return rows
            await asyncio.sleep(0.01)
    return []


async def heavy_user(
    engine: AsyncEngine, rng: random.Random, count: int
) -> tuple[int, list[float]]:
    centre = unit(rng)
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="talker")
        await notes(conn, user_pk, rng, count - 10, None)
        await notes(conn, user_pk, rng, 10, centre)
    return user_pk, centre


async def test_a_write_to_the_user_waits_for_one_batch_of_the_move_at_most(
    engine: AsyncEngine, paused_move: Callable[[int, set[int]], Paused]
) -> None:
    """While a batch is uncommitted it holds its own rows alone: a write to any other row
    of the user commits at once (lock_timeout 5 s: none waits), a write to one of its
    rows waits for that batch only (it commits while the next batch is held), and the
    search answers the same throughout. Fails when a batch takes every row (no LIMIT:
    45 rows held), and when the batches share one transaction (the write behind the
    first batch times out)."""
    rng = random.Random(41)
    user_pk, centre = await heavy_user(engine, rng, 45)
    queries = [near(rng, centre, 1.0) for _ in range(3)] + [unit(rng)]
    before = await searches(engine, user_pk, queries)

    pause = paused_move(user_pk, {1, 2})
    await pause.reached()
    first = await held(engine, user_pk)
    assert len(first) == BATCH
    ids = sorted((await ann_of(engine, user_pk)).keys())
    free = [i for i in ids if i not in first]

    async def write(statement: Callable[[AsyncConnection], Awaitable[Any]]) -> None:
        async with engine.begin() as conn:
            await conn.execute(text("SET LOCAL lock_timeout = '5s'"))
            await statement(conn)

    # A write to rows the batch does not hold: an update, an add and a supersede, a delete.
    await write(lambda c: repo.set_pinned(c, user_pk=user_pk, memory_id=free[0], pinned=True))
    added: list[int] = []

    async def supersede(conn: AsyncConnection) -> None:
        added.append(await add(conn, user_pk, "restated", embedding=near(rng, centre)))
        await repo.supersede(conn, old_id=free[1], new_id=added[0], user_pk=user_pk)

    await write(supersede)
    await write(lambda c: repo.delete_memory(c, user_pk=user_pk, memory_id=free[2]))
    before = await searches(engine, user_pk, queries)
    assert added[0] in {i for found in before for i, _ in found}  # outside the index, found

    # A write to a row the batch holds waits for that batch, and no longer.
    behind = asyncio.create_task(
        write(lambda c: repo.set_pinned(c, user_pk=user_pk, memory_id=min(first), pinned=True))
    )
    assert [w.blockers for w in await waiting(engine)] == [[pause.pids[0]]]
    pause.resume()
    await pause.reached()  # the second batch holds its rows, uncommitted
    await behind
    assert len(await held(engine, user_pk)) == BATCH
    assert sum((await ann_of(engine, user_pk)).values()) == BATCH
    assert await searches(engine, user_pk, queries) == before  # half-way
    pause.resume()
    moved = await pause.move
    assert moved == 45 and pause.batches == [10, 10, 10, 10, 5]  # 45 - 1 deleted + 1 added
    assert all((await ann_of(engine, user_pk)).values())
    assert await searches(engine, user_pk, queries) == before


async def test_a_move_killed_half_way_is_finished_by_the_users_next_job(
    engine: AsyncEngine, settings: Settings, paused_move: Callable[[int, set[int]], Paused]
) -> None:
    """The move's backend terminated during its third batch (two committed): that batch
    is undone, the rows of the first two stay in the index, the search answers as before,
    and the next job of the user (an index run) moves the rest. Fails when a move takes
    only a user with no row in the index yet (a one-time move: the rest stays outside)."""
    rng = random.Random(42)
    user_pk, centre = await heavy_user(engine, rng, 45)
    queries = [near(rng, centre, 1.0) for _ in range(3)] + [unit(rng)]
    before = await searches(engine, user_pk, queries)

    pause = paused_move(user_pk, {3})
    await pause.reached()
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pause.pids[-1]})
    pause.resume()
    with pytest.raises(DBAPIError):
        await pause.move
    flags = await ann_of(engine, user_pk)
    assert sum(flags.values()) == 2 * BATCH
    assert await searches(engine, user_pk, queries) == before

    await talk(engine, "next", user="talker", n=2)  # the user's next job
    assert await index_worker(engine, settings, Recording()).run_once() is not None
    flags = await ann_of(engine, user_pk)
    assert len(flags) > 45 and all(flags.values())
    await assert_searches_exactly(engine, user_pk, queries)  # its rows among them


async def index_scan(engine: AsyncEngine, user_pk: int, query: list[float]) -> str:
    """The line of the heavy search's index scan in its EXPLAIN ANALYZE."""
    async with engine.begin() as conn:
        await plan_of(conn, (), generic=False)  # the settings
        db = await driver_connection(conn)
        plan = [
            r[0]
            for r in await db.fetch(
                "EXPLAIN (ANALYZE, COSTS OFF) " + repo.VECTOR_HNSW, user_pk, query, MODEL, None, 5
            )
        ]
    return str(next(line for line in plan if "memories_embedding_hnsw_idx" in line))


async def test_half_way_through_a_move_the_search_is_exact_and_skips_the_index_scan(
    engine: AsyncEngine, paused_move: Callable[[int, set[int]], Paused]
) -> None:
    """With FLIP_BATCH rows or more of the user still outside the index, the index leg
    is not run (an iterative scan for a user with few rows in the index reads its whole
    budget of other users' rows to find them): the rows already moved are ranked exactly
    beside the others. Once the move is done, the index leg runs. Fails when the index
    leg runs as soon as the user has a row in the index."""
    rng = random.Random(43)
    user_pk, centre = await heavy_user(engine, rng, 2 * BATCH + MOVING + 5)
    queries = [near(rng, centre, 1.0) for _ in range(3)] + [unit(rng)]

    pause = paused_move(user_pk, {3})
    await pause.reached()  # two batches in the index, MOVING + 5 rows outside
    assert sum((await ann_of(engine, user_pk)).values()) == 2 * BATCH
    assert "never executed" in await index_scan(engine, user_pk, queries[0])
    await assert_searches_exactly(engine, user_pk, queries)
    pause.resume()
    await pause.move
    assert all((await ann_of(engine, user_pk)).values())
    assert "never executed" not in await index_scan(engine, user_pk, queries[0])
    await assert_searches_exactly(engine, user_pk, queries)

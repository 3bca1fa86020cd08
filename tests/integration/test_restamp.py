"""The units records an upgrade made stale (other rules than ``RULES_STAMP`` stored
them) are stored again by the restamp sweep, for sessions nobody posts to: a worker
that starts with rules the sweep has not finished for queues it, a job re-stores a few
sessions and queues its successor, and the one that reaches the newest session records
the rules as swept. A record the current rules stored, and a compacted turn's, is left
as it is; a post, a pop or a delete racing it loses nothing; a second sweep is a
no-op. Against real Postgres."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app import worker as worker_module
from app.compression.live_notes import RULES_STAMP
from app.core.config import Settings
from app.core.jobs import JobKind
from app.core.metrics import Metrics
from app.core.turns import PreparedTurn
from app.services import restamp as sweep
from app.services.pop import pop_turn
from app.services.restamp import RestampDeps, restamp_units, start_sweep
from app.stores import sweeps
from app.wiring import build_worker
from app.worker import Worker
from tests.integration.test_index_batches import _turn
from tests.integration.test_read_units import (
    between_read_and_write,
    expected,
    index_worker,
    post,
    stored,
)
from tests.integration.test_stale_units import OTHER_RULES, conversation, restamp

MINE = {"rules": RULES_STAMP, "units": []}  # stored by a run of the current rules


def restamp_worker(engine: AsyncEngine, settings: Settings, counted: list[int]) -> Worker:
    """A worker that runs the sweep alone (any other kind it claims is buried)."""
    deps = RestampDeps(on_restamped=counted.append)
    return Worker(
        engine=engine,
        handlers={JobKind.RESTAMP_UNITS: restamp_units.bind(deps)},
        settings=settings,
        at_start=[lambda: start_sweep(engine)],
    )


def talk(first: int) -> list[PreparedTurn]:
    """A conversation's post: two user turns, each with an answer."""
    return [
        _turn(first, "user", "Never restart the primary during the migration."),
        _turn(first + 1, "assistant", "Understood."),
        _turn(first + 2, "user", f"The maintenance window is Saturday {first % 24:02d}:00 UTC."),
        _turn(first + 3, "assistant", "Noted."),
    ]


async def sessions_posted(engine: AsyncEngine, n: int) -> list[PreparedTurn]:
    """``n`` sessions of one conversation's post each (message ids unique across them)."""
    turns: list[PreparedTurn] = []
    for i in range(n):
        posted = talk(1 + 4 * i)
        await post(engine, posted, session=f"s{i}")
        turns += posted
    return turns


async def jobs_of_sweep(engine: AsyncEngine) -> list[tuple[str, dict[str, Any]]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT status, payload FROM jobs WHERE kind = :k ORDER BY id"),
            {"k": JobKind.RESTAMP_UNITS},
        )
        return [(r.status, r.payload) for r in rows]


async def sweep_to_the_end(worker: Worker) -> int:
    """Run jobs one by one until none is left (another kind is buried); how many of the
    sweep's ran."""
    ran = []
    while (claimed := await worker.run_once()) is not None:
        ran.append(claimed.kind)
        assert len(ran) < 100
    return ran.count(JobKind.RESTAMP_UNITS)


async def test_a_worker_starting_on_stale_records_stores_them_again(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep, "SESSIONS_PER_JOB", 2)
    turns = await sessions_posted(engine, 5)  # read at ingest, by the current rules
    await restamp(engine, OTHER_RULES)  # an upgrade changed them since
    counted: list[int] = []
    worker = restamp_worker(engine, settings, counted)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        for _ in range(600):  # 30 s at most
            statuses = {status for status, _ in await jobs_of_sweep(engine)}
            if statuses == {"done"} and await stored(engine) == expected(turns):
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await running
    # Five sessions two by two: three jobs, each from where the one before stopped.
    assert await jobs_of_sweep(engine) == [
        ("done", {"after": 0}),
        ("done", {"after": 2}),
        ("done", {"after": 4}),
    ]
    assert sum(counted) == 10  # two user turns a session
    assert await swept_for(engine) == RULES_STAMP


async def swept_for(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await sweeps.swept_for(conn, name=sweep.NAME)


async def test_once_per_change_of_the_rules(engine: AsyncEngine, settings: Settings) -> None:
    """A database with nothing stale is looked through once; then a worker's start queues
    nothing, until an upgrade changes the rules."""
    turns = await sessions_posted(engine, 2)
    worker = restamp_worker(engine, settings, [])
    assert await start_sweep(engine) is not None  # never swept
    assert await sweep_to_the_end(worker) == 1
    assert await swept_for(engine) == RULES_STAMP
    assert await start_sweep(engine) is None
    async with engine.begin() as conn:  # swept by older rules: then an upgrade
        await sweeps.finish_sweep(conn, name=sweep.NAME, stamp="0123456789abcdef")
    await restamp(engine, OTHER_RULES)
    assert await start_sweep(engine) is not None
    assert await sweep_to_the_end(worker) == 1
    assert await stored(engine) == expected(turns)
    assert await swept_for(engine) == RULES_STAMP


async def test_each_job_looks_through_a_bounded_range_of_sessions(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep, "SESSION_SPAN", 2)
    turns = await sessions_posted(engine, 5)
    await restamp(engine, OTHER_RULES)
    async with engine.begin() as conn:  # sessions 3 and 4: no record yet, their jobs to come
        await conn.execute(
            text("UPDATE turns SET units = NULL WHERE session_id IN (3, 4) AND role = 'user'")
        )
    assert await start_sweep(engine) is not None
    assert await sweep_to_the_end(restamp_worker(engine, settings, [])) == 3
    assert [payload for _, payload in await jobs_of_sweep(engine)] == [
        {"after": 0},
        {"after": 2},
        {"after": 4},
    ]
    want = expected(turns)
    records = await stored(engine)
    assert {m: r for m, r in records.items() if r is not None} == {
        m: r for m, r in want.items() if m not in {f"m-{i}" for i in range(9, 17)} and r
    }


async def test_a_record_the_current_rules_stored_and_a_compacted_turns_are_left(
    engine: AsyncEngine, settings: Settings
) -> None:
    current, other = conversation(), talk(101)
    await post(engine, current, session="current")
    await post(engine, other, session="other")
    await restamp(engine, MINE)
    async with engine.begin() as conn:
        await conn.execute(
            text("""UPDATE turns t SET units = CAST(CAST(:r AS text) AS jsonb) FROM sessions s
                     WHERE s.id = t.session_id AND s.external_id = 'other'
                       AND t.role = 'user'"""),
            {"r": json.dumps(OTHER_RULES)},
        )
        # One stale record of a compacted turn: no read uses it, the sweep leaves it.
        await conn.execute(text("UPDATE turns SET compacted = true WHERE external_id = 'm-101'"))
    counted: list[int] = []
    worker = restamp_worker(engine, settings, counted)
    assert await start_sweep(engine) is not None
    assert await sweep_to_the_end(worker) == 1
    records = await stored(engine)
    want = expected(other)
    assert records["m-101"] == OTHER_RULES  # compacted: left
    assert records["m-103"] == want["m-103"]  # live and stale: stored again
    assert [records[f"{t.client_id}"] for t in current if t.role == "user"] == [MINE, MINE]
    assert counted == [1]


async def test_a_second_sweep_is_a_no_op(engine: AsyncEngine, settings: Settings) -> None:
    turns = await sessions_posted(engine, 3)
    await restamp(engine, OTHER_RULES)
    worker = restamp_worker(engine, settings, [])
    assert await start_sweep(engine) is not None
    assert await start_sweep(engine) is None  # one waits already
    assert await sweep_to_the_end(worker) == 1
    assert await stored(engine) == expected(turns)
    async with engine.connect() as conn:
        versions = await conn.scalar(text("SELECT sum(xmin::text::bigint) FROM turns"))

    assert await start_sweep(engine) is None  # nothing stale: no job
    async with engine.begin() as conn:  # and a job queued anyway writes nothing
        await sweep.enqueue(conn)
    counted: list[int] = []
    assert await sweep_to_the_end(restamp_worker(engine, settings, counted)) == 1
    assert counted == []
    async with engine.connect() as conn:
        assert await conn.scalar(text("SELECT sum(xmin::text::bigint) FROM turns")) == versions
    assert [status for status, _ in await jobs_of_sweep(engine)] == ["done", "done"]


async def test_the_sweep_is_claimed_after_every_other_kind(
    engine: AsyncEngine, settings: Settings
) -> None:
    await post(engine, conversation())  # queues its index job
    await restamp(engine, OTHER_RULES)
    assert await start_sweep(engine) is not None
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT kind, priority FROM jobs"))
        priorities = {r.kind: r.priority for r in rows}
    assert priorities[JobKind.RESTAMP_UNITS] < min(
        p for k, p in priorities.items() if k != JobKind.RESTAMP_UNITS
    )
    claimed = await index_worker(engine, settings).run_once()
    assert claimed is not None and claimed.kind == JobKind.INDEX_SESSION


async def swept_once(engine: AsyncEngine, settings: Settings) -> None:
    """Start the sweep and run it: one job, done (the session was read before any race)."""
    assert await start_sweep(engine) is not None
    assert await sweep_to_the_end(restamp_worker(engine, settings, [])) == 1
    assert [status for status, _ in await jobs_of_sweep(engine)] == ["done"]


async def test_a_post_meanwhile_loses_nothing(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, later = talk(1), talk(5)
    await post(engine, first)
    await restamp(engine, OTHER_RULES)
    between_read_and_write(monkeypatch, sweep, lambda: post(engine, later))
    await swept_once(engine, settings)
    assert await stored(engine) == expected([*first, *later])


async def test_a_pop_meanwhile_loses_nothing(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = talk(1)
    await post(engine, turns)
    await restamp(engine, OTHER_RULES)

    async def pop_twice() -> None:  # the newest user turn goes, with its answer
        for _ in range(2):
            async with engine.begin() as conn:
                await pop_turn(conn, tenant="default", session="s", job_max_attempts=3)

    between_read_and_write(monkeypatch, sweep, pop_twice)
    await swept_once(engine, settings)
    assert await stored(engine) == expected(turns[:2])


async def test_a_session_deleted_meanwhile_is_not_written(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await post(engine, talk(1))
    await restamp(engine, OTHER_RULES)

    async def delete() -> None:
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM sessions"))

    between_read_and_write(monkeypatch, sweep, delete)
    await swept_once(engine, settings)
    assert await stored(engine) == {}


async def test_a_writer_holding_the_session_is_waited_for(
    engine: AsyncEngine, settings: Settings
) -> None:
    """The sweep writes a session's turns under its row lock, taken first, as a post, a
    pop, a delete and a compression do: it waits for one in progress, and none of them
    can hold a turn it waits for (a deadlock that would fail one of them)."""
    turns = talk(1)
    await post(engine, turns)
    await restamp(engine, OTHER_RULES)
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM jobs"))  # the post's index job
    assert await start_sweep(engine) is not None
    worker = restamp_worker(engine, settings, [])
    async with engine.connect() as holder:
        await holder.execute(text("SELECT 1 FROM sessions FOR UPDATE"))  # as a post locks
        running = asyncio.create_task(worker.run_once())
        await asyncio.sleep(0.5)
        assert not running.done()  # waiting for the lock
        await holder.rollback()
    async with asyncio.timeout(10):
        assert await running is not None
    assert await stored(engine) == expected(turns)


async def test_the_service_worker_sweeps_at_its_start(
    engine: AsyncEngine, settings: Settings
) -> None:
    """``mnemo worker`` (``--once`` here): the handler and the start-up task are wired."""
    turns = await sessions_posted(engine, 3)
    await restamp(engine, OTHER_RULES)
    metrics = Metrics()
    async with httpx.AsyncClient() as http:
        worker = build_worker(settings, engine, http=http, metrics=metrics)
        await worker.drain(asyncio.Event())
    assert await stored(engine) == expected(turns)
    assert await swept_for(engine) == RULES_STAMP
    assert metrics.registry.get_sample_value("mnemo_units_restamped_total") == 6


async def test_a_start_up_task_the_database_failed_is_tried_again(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker started before ``mnemo migrate`` (no ``sweeps`` yet) queues the sweep once
    the table is there, not never."""
    monkeypatch.setattr(worker_module, "START_RETRY_S", 0.05)
    async with engine.begin() as conn:
        await conn.execute(text("ALTER TABLE sweeps RENAME TO sweeps_later"))
    worker = restamp_worker(engine, settings, [])
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.sleep(0.3)  # tried and failed, more than once
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE sweeps_later RENAME TO sweeps"))
        for _ in range(200):  # 10 s at most
            if await swept_for(engine) == RULES_STAMP:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await running
    assert await swept_for(engine) == RULES_STAMP

"""A worker that is stopped (SIGTERM: serve's lag guard swapping it, or `mnemo worker`
shut down) hands its jobs back to the queue: another worker takes them at once, not
when their lease expires, and each job's effect is applied once."""

from __future__ import annotations

import asyncio
import random

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.jobs import JobKind
from app.services.jobs import JobContext
from app.stores import queue
from app.worker import Worker
from tests.conftest import make_settings
from tests.integration.test_jobs import enqueue, job_rows, new_session

# Far longer than any test: a job another worker takes was handed back, not expired.
LONG_LEASE_S = 600.0


async def effects_table(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE effects (job_id bigint NOT NULL)"))


async def applied(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as conn:
        return sorted((await conn.execute(text("SELECT job_id FROM effects"))).scalars())


def record(ctx: JobContext):  # type: ignore[no-untyped-def]
    async def apply(conn: AsyncConnection) -> None:
        await conn.execute(text("INSERT INTO effects VALUES (:id)"), {"id": ctx.job.id})

    return apply


async def until_held(engine: AsyncEngine, name: str, n: int) -> None:
    for _ in range(500):  # however slow the machine
        if sum(j["locked_by"] == name for j in await job_rows(engine)) >= n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} never held {n} jobs: {await job_rows(engine)}")


async def test_a_stopped_worker_hands_back_its_jobs_and_another_takes_them_at_once(
    engine: AsyncEngine, db_url: str
) -> None:
    """The stopped worker's jobs hang past its grace: they are cancelled (nothing of
    them applied) and handed back with their attempt not counted; the next worker
    claims every one of them long before their lease would have ended."""
    await effects_table(engine)
    settings = make_settings(
        db_url, job_lease_s=LONG_LEASE_S, worker_concurrency=2, worker_stop_grace_s=0.1
    )
    hang = asyncio.Event()

    async def hangs(ctx: JobContext) -> None:
        await hang.wait()
        await ctx.commit(record(ctx))

    async def works(ctx: JobContext) -> None:
        await ctx.commit(record(ctx))

    ids = [await enqueue(engine, "work", None, attempts=1) for _ in range(3)]
    stop = asyncio.Event()
    stopped = Worker(engine=engine, handlers={"work": hangs}, settings=settings, name="old")
    run = asyncio.create_task(stopped.run(stop))
    await until_held(engine, "old", 2)
    stop.set()
    await asyncio.wait_for(run, 30)
    rows = {j["id"]: j for j in await job_rows(engine)}
    held = [i for i in ids if rows[i]["status"] == "running"]
    assert len(held) == 2 and await applied(engine) == []
    assert all(rows[i]["locked_by"] is None and rows[i]["attempts"] == 0 for i in held)

    taker = Worker(engine=engine, handlers={"work": works}, settings=settings, name="new")
    taken = [await taker.run_once() for _ in range(4)]
    # On their only attempt (max_attempts 1): run, not buried as a lease lost.
    assert sorted(j.id for j in taken if j is not None) == ids and taken[3] is None
    assert await applied(engine) == ids
    assert {(j["status"], j["locked_by"]) for j in await job_rows(engine)} == {("done", "new")}


async def test_a_running_job_finishes_within_the_grace_and_is_not_handed_back(
    engine: AsyncEngine, db_url: str
) -> None:
    await effects_table(engine)
    settings = make_settings(db_url, job_lease_s=LONG_LEASE_S, worker_stop_grace_s=60)
    started, finish = asyncio.Event(), asyncio.Event()

    async def slow(ctx: JobContext) -> None:
        started.set()
        await finish.wait()
        await ctx.commit(record(ctx))

    job_id = await enqueue(engine, "work", None)
    stop = asyncio.Event()
    w = Worker(engine=engine, handlers={"work": slow}, settings=settings, name="w")
    run = asyncio.create_task(w.run(stop))
    await asyncio.wait_for(started.wait(), 30)
    stop.set()
    await asyncio.sleep(0.2)  # the worker is winding down: the job still runs
    assert not run.done()
    finish.set()
    await asyncio.wait_for(run, 30)
    [row] = await job_rows(engine)
    assert (row["status"], row["locked_by"], row["attempts"]) == ("done", "w", 1)
    assert await applied(engine) == [job_id]


async def test_a_handed_back_compression_runs_before_its_sessions_next_one(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    """One compression of a session at a time: the handed-back one keeps its place (the
    one-running-job index), the session's next one, queued meanwhile, waits for it."""
    settings = make_settings(db_url, job_lease_s=LONG_LEASE_S, worker_stop_grace_s=0)
    sid = await new_session(client, engine)
    hang = asyncio.Event()

    async def hangs(ctx: JobContext) -> None:
        await hang.wait()

    first = await enqueue(engine, JobKind.COMPRESS, sid)
    stop = asyncio.Event()
    old = Worker(engine=engine, handlers={JobKind.COMPRESS: hangs}, settings=settings, name="old")
    run = asyncio.create_task(old.run(stop))
    await until_held(engine, "old", 1)
    second = await enqueue(engine, JobKind.COMPRESS, sid)
    assert second is not None
    stop.set()
    await asyncio.wait_for(run, 30)

    async def claim() -> int | None:
        async with engine.begin() as conn:
            job = await queue.claim(conn, worker="new", lease_s=LONG_LEASE_S)
        return None if job is None else job.id

    assert await claim() == first
    assert await claim() is None  # the session's next compression waits for it
    async with engine.begin() as conn:
        assert await queue.complete(conn, job_id=first, worker="new")
    assert await claim() == second


async def test_workers_stopped_at_random_moments_lose_and_repeat_no_job(
    engine: AsyncEngine, db_url: str
) -> None:
    """Race: workers stopped while jobs run, commit, or are being claimed,
    in turn, then one worker drains the queue: every job applied once."""
    await effects_table(engine)
    settings = make_settings(
        db_url, job_lease_s=LONG_LEASE_S, worker_concurrency=3, worker_stop_grace_s=0.01
    )
    rng = random.Random(7)

    async def jittery(ctx: JobContext) -> None:
        await asyncio.sleep(rng.uniform(0, 0.02))
        await ctx.commit(record(ctx))

    ids = [await enqueue(engine, "work", None) for _ in range(60)]
    for round_ in range(6):
        stop = asyncio.Event()
        workers = [
            Worker(
                engine=engine, handlers={"work": jittery}, settings=settings, name=f"r{round_}w{i}"
            )
            for i in range(2)
        ]
        runs = [asyncio.create_task(w.run(stop)) for w in workers]
        await asyncio.sleep(rng.uniform(0.02, 0.15))
        stop.set()
        await asyncio.wait_for(asyncio.gather(*runs), 30)
        # Nothing is left held by a stopped worker.
        assert not [
            j for j in await job_rows(engine) if j["locked_by"] and j["status"] == "running"
        ]
    drainer = Worker(engine=engine, handlers={"work": jittery}, settings=settings, name="last")
    while await drainer.run_once() is not None:
        pass
    assert await applied(engine) == ids
    assert {j["status"] for j in await job_rows(engine)} == {"done"}

"""A job that runs past ``MNEMO_JOB_TIMEOUT_S`` is stopped and counts as a failed
attempt: a hanging handler frees its worker's slot, nothing of it is applied, and it
runs out of attempts instead of holding the job for good."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from app.services.jobs import JobContext
from app.worker import Worker
from tests.conftest import make_settings
from tests.integration.test_jobs import enqueue, job_rows
from tests.integration.test_worker_stop import applied, effects_table, record


async def test_a_job_past_its_time_limit_fails_its_attempt_and_frees_the_slot(
    engine: AsyncEngine, db_url: str
) -> None:
    await effects_table(engine)
    settings = make_settings(db_url, job_timeout_s=0.3, job_backoff_base_s=30, worker_concurrency=1)
    never = asyncio.Event()

    async def hangs(ctx: JobContext) -> None:
        await never.wait()
        await ctx.commit(record(ctx))

    async def works(ctx: JobContext) -> None:
        await ctx.commit(record(ctx))

    hung = await enqueue(engine, "hang", None, attempts=2)
    fine = await enqueue(engine, "work", None)
    w = Worker(engine=engine, handlers={"hang": hangs, "work": works}, settings=settings, name="w")
    stop = asyncio.Event()
    run = asyncio.create_task(w.run(stop))
    for _ in range(500):  # however slow the machine
        rows = {j["id"]: j for j in await job_rows(engine)}
        if rows[fine]["status"] == "done" and rows[hung]["status"] == "queued":
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(run, 30)
    rows = {j["id"]: j for j in await job_rows(engine)}
    # One slot: the other job ran only because the hanging one was stopped.
    assert rows[fine]["status"] == "done" and await applied(engine) == [fine]
    assert rows[hung]["status"] == "queued" and rows[hung]["attempts"] == 1
    assert "MNEMO_JOB_TIMEOUT_S" in rows[hung]["last_error"]


async def test_a_job_that_times_out_on_its_last_attempt_is_buried(
    engine: AsyncEngine, db_url: str
) -> None:
    settings = make_settings(db_url, job_timeout_s=0.2)

    async def hangs(ctx: JobContext) -> None:
        await asyncio.Event().wait()

    job_id = await enqueue(engine, "hang", None, attempts=1)
    w = Worker(engine=engine, handlers={"hang": hangs}, settings=settings, name="w")
    assert (await asyncio.wait_for(w.run_once(), 30)) is not None
    [row] = await job_rows(engine)
    assert (row["id"], row["status"], row["attempts"]) == (job_id, "dead", 1)
    assert "MNEMO_JOB_TIMEOUT_S" in row["last_error"]

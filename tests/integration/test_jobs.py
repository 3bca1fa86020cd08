"""The Postgres job queue and worker, end to end on a real database."""

from __future__ import annotations

import asyncio

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.config import Settings
from app.core.jobs import JobKind
from app.services.jobs import JobContext
from app.stores import queue
from app.wiring import build_handlers
from app.worker import Worker
from tests.conftest import make_settings, post_turns


async def job_rows(engine: AsyncEngine) -> list:
    async with engine.connect() as conn:
        return list((await conn.execute(text("SELECT * FROM jobs ORDER BY id"))).mappings().all())


async def new_session(client: httpx.AsyncClient, engine: AsyncEngine, name: str = "s") -> int:
    # An assistant turn: it queues no job of its own (a user turn queues episode indexing).
    await post_turns(client, name, [{"role": "assistant", "content": "hi"}])
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    text("SELECT id FROM sessions WHERE external_id=:n"), {"n": name}
                )
            ).scalar_one()
        )


async def enqueue(
    engine: AsyncEngine, kind: str, session_id: int | None, attempts: int = 3
) -> int | None:
    async with engine.begin() as conn:
        return await queue.enqueue(
            conn, tenant_id="default", session_id=session_id, kind=kind, max_attempts=attempts
        )


def worker(engine: AsyncEngine, settings: Settings, handlers: dict, name: str = "w1") -> Worker:
    return Worker(engine=engine, handlers=handlers, settings=settings, name=name)


async def test_trigger_enqueues_one_compression_in_the_ingest_transaction(
    db_url: str, engine: AsyncEngine
) -> None:
    from app.wiring import create_app

    settings = make_settings(
        db_url,
        model_window_tokens=1024,
        system_prompt_tokens=0,
        tool_schema_tokens=0,
        reserved_output_tokens=700,
    )
    app = create_app(settings, database_url=db_url, engine=engine)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://m"
        ) as c:
            small = [{"role": "user", "content": "short"}] * 8
            r = (await post_turns(c, "s", small)).json()
            assert r["compression_scheduled"] is False
            big = [{"role": "user", "content": "many words here " * 80}]
            r = (await post_turns(c, "s", big)).json()
            assert r["compression_scheduled"] is True and r["trigger"] == "token_threshold"
            r = (await post_turns(c, "s", big)).json()
            assert r["compression_scheduled"] is True
            # one compression and one episode-indexing job wait
            assert (await c.get("/v1/sessions/s")).json()["pending_jobs"] == 2
    jobs = [j for j in await job_rows(engine) if j["kind"] == "compress"]
    # The second trigger found a compression already waiting: still one job.
    assert [(j["kind"], j["status"]) for j in jobs] == [("compress", "queued")]
    assert jobs[0]["payload"] == {"trigger": "token_threshold"}


async def test_failing_job_is_retried_with_backoff_then_dead(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    # Backoff 0.5 s, then 1 s: wide enough margins for a loaded machine.
    settings = make_settings(db_url, job_backoff_base_s=0.5)
    sid = await new_session(client, engine)
    calls = 0

    async def always_fails(ctx: JobContext) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    w = worker(engine, settings, {"flaky": always_fails})
    await enqueue(engine, "flaky", sid, attempts=3)
    assert (await w.run_once()) is not None
    [job] = await job_rows(engine)
    assert job["status"] == "queued" and job["attempts"] == 1
    assert "RuntimeError: boom" in job["last_error"]
    assert job["run_after"] > job["updated_at"]  # not due before the backoff
    assert await w.run_once() is None  # backoff not yet elapsed
    for delay in (0.5, 1.0):
        await asyncio.sleep(delay + 0.1)
        assert await w.run_once() is not None
    [job] = await job_rows(engine)
    assert job["status"] == "dead" and job["attempts"] == 3 and calls == 3
    assert "max_attempts" in job["last_error"]
    await asyncio.sleep(0.3)
    assert await w.run_once() is None  # dead jobs stay dead


async def test_unknown_kind_goes_to_dead_letter(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    await enqueue(engine, "mystery", None)
    await worker(engine, settings, {}).run_once()
    [job] = await job_rows(engine)
    assert job["status"] == "dead" and "no handler" in job["last_error"]


async def test_stalled_job_is_reclaimed_and_applied_once(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    sid = await new_session(client, engine)
    settings = make_settings(db_url, job_lease_s=1.0)
    release = asyncio.Event()

    async def apply_marker(conn: AsyncConnection) -> None:
        await conn.execute(
            text("UPDATE sessions SET compressions = compressions + 1 WHERE id = :s"), {"s": sid}
        )

    async def slow(ctx: JobContext) -> None:
        await release.wait()  # a worker that hangs past its lease
        await ctx.commit(apply_marker)

    async def fast(ctx: JobContext) -> None:
        await ctx.commit(apply_marker)

    stuck = worker(engine, settings, {"work": slow}, "stuck")
    rescuer = worker(engine, settings, {"work": fast}, "rescuer")
    await enqueue(engine, "work", sid)
    # Heartbeats would keep the lease alive; a hung event loop would not. Simulate that.
    stuck._heartbeat = _no_heartbeat  # type: ignore[method-assign]
    stuck_task = asyncio.create_task(stuck.run_once())
    for _ in range(200):  # until the stuck worker holds the job (however slow the machine)
        if [j for j in await job_rows(engine) if j["locked_by"] == "stuck"]:
            break
        await asyncio.sleep(0.02)
    assert await rescuer.run_once() is None  # lease still valid: nobody else takes it
    await asyncio.sleep(1.2)
    assert (await rescuer.run_once()) is not None  # lease expired: re-claimed
    release.set()
    await stuck_task  # its commit finds the job no longer its own and rolls back
    [job] = await job_rows(engine)
    assert job["status"] == "done" and job["locked_by"] == "rescuer" and job["attempts"] == 2
    async with engine.connect() as conn:
        applied = (await conn.execute(text("SELECT compressions FROM sessions"))).scalar_one()
    assert applied == 1


async def _no_heartbeat(job: object) -> None:
    await asyncio.Event().wait()


async def test_commit_then_crash_is_not_applied_twice(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    sid = await new_session(client, engine)

    async def commits_then_fails(ctx: JobContext) -> None:
        async def apply(conn: AsyncConnection) -> None:
            await conn.execute(text("UPDATE sessions SET compressions = compressions + 1"))

        await ctx.commit(apply)
        raise RuntimeError("after the commit")

    w = worker(engine, settings, {"work": commits_then_fails})
    await enqueue(engine, "work", sid)
    await w.run_once()
    await asyncio.sleep(0.2)
    assert await w.run_once() is None
    [job] = await job_rows(engine)
    assert job["status"] == "done"
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT compressions FROM sessions"))).scalar_one() == 1


async def test_one_running_job_per_session_and_kind(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    sid = await new_session(client, engine, "a")
    other = await new_session(client, engine, "b")
    gate = asyncio.Event()

    async def blocked(ctx: JobContext) -> None:
        await gate.wait()

    w1 = worker(engine, settings, {"compress": blocked}, "w1")
    w2 = worker(engine, settings, {"compress": blocked}, "w2")
    await enqueue(engine, "compress", sid)
    first = asyncio.create_task(w1.run_once())
    await asyncio.sleep(0.1)
    assert await enqueue(engine, "compress", sid) is not None  # may wait while one runs
    assert await enqueue(engine, "compress", sid) is None  # but only one waits
    await enqueue(engine, "compress", other)
    second = asyncio.create_task(w2.run_once())
    await asyncio.sleep(0.1)
    running = [j for j in await job_rows(engine) if j["status"] == "running"]
    # w2 skipped the waiting job of session a and took session b's.
    assert sorted(j["session_id"] for j in running) == sorted([sid, other])
    gate.set()
    await asyncio.gather(first, second)
    assert (await w2.run_once()) is not None  # now session a's second job runs
    assert {j["status"] for j in await job_rows(engine)} == {"done"}


async def test_notify_wakes_an_idle_worker(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    sid = await new_session(client, engine)
    # Polling alone would take a minute; only NOTIFY can make this quick.
    settings = make_settings(db_url, job_poll_interval_s=60)
    done = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        done.set()

    stop = asyncio.Event()
    task = asyncio.create_task(worker(engine, settings, {"ping": handler}).run(stop))
    await asyncio.sleep(0.5)  # the worker has polled once and is now waiting
    await enqueue(engine, "ping", sid)
    try:
        await asyncio.wait_for(done.wait(), timeout=10)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


async def test_recount_handler_repairs_the_token_counter(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    sid = await new_session(client, engine)
    async with engine.begin() as conn:
        expected = (await conn.execute(text("SELECT history_tokens FROM sessions"))).scalar_one()
        await conn.execute(text("UPDATE sessions SET history_tokens = 999999"))
    await enqueue(engine, "recount_tokens", sid)
    await worker(engine, settings, build_handlers(settings)).run_once()
    async with engine.connect() as conn:
        assert (
            await conn.execute(text("SELECT history_tokens FROM sessions"))
        ).scalar_one() == expected


async def test_a_claim_skips_the_job_another_worker_holds_locked(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """Worker 1 has selected its job and not committed yet; worker 2 takes the next job at
    once (SKIP LOCKED) instead of queueing behind the lock."""
    first = await enqueue(engine, "work", await new_session(client, engine, "a"))
    second = await enqueue(engine, "work", await new_session(client, engine, "b"))
    async with engine.connect() as holder, engine.connect() as other:
        async with holder.begin():
            held = await queue.claim(holder, worker="w1", lease_s=30)
            assert held is not None and held.id == first
            async with other.begin():
                # Waiting for w1's row lock would end in an error here, not in a hang.
                await other.execute(text("SET LOCAL lock_timeout = '2s'"))
                taken = await queue.claim(other, worker="w2", lease_s=30)
                assert taken is not None and taken.id == second
                assert await queue.claim(other, worker="w2", lease_s=30) is None
    rows = await job_rows(engine)
    assert [(j["id"], j["status"], j["locked_by"]) for j in rows] == [
        (first, "running", "w1"),
        (second, "running", "w2"),
    ]


async def test_lease_expired_on_the_last_attempt_buries_the_job(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    settings = make_settings(db_url, job_lease_s=0.5)
    sid = await new_session(client, engine)
    calls = 0

    async def counts(ctx: JobContext) -> None:
        nonlocal calls
        calls += 1

    await enqueue(engine, "work", sid, attempts=1)
    # The only attempt: claimed by a worker that then dies (it never reports back).
    async with engine.begin() as conn:
        claimed = await queue.claim(conn, worker="died", lease_s=0.5)
    assert claimed is not None and claimed.attempts == 1
    rescuer = worker(engine, settings, {"work": counts}, "rescuer")
    assert await rescuer.run_once() is None  # the lease still holds
    await asyncio.sleep(0.7)
    job = await rescuer.run_once()
    assert job is not None and job.attempts == 2
    [row] = await job_rows(engine)
    assert row["status"] == "dead" and "lease expired on the last attempt" in row["last_error"]
    assert calls == 0  # buried, not run a second time
    assert await rescuer.run_once() is None


async def test_a_claim_that_fails_on_the_database_is_no_job_and_the_next_one_works(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings, caplog: object
) -> None:
    import logging

    import pytest

    assert isinstance(caplog, pytest.LogCaptureFixture)
    sid = await new_session(client, engine)
    await enqueue(engine, "work", sid)
    ran: list[int] = []

    async def handler(ctx: JobContext) -> None:
        ran.append(ctx.job.id)

    w = worker(engine, settings, {"work": handler})
    async with engine.begin() as conn:  # the claim's statement now fails in Postgres
        await conn.execute(text("ALTER TABLE jobs RENAME TO jobs_away"))
    with caplog.at_level(logging.WARNING, logger="app.worker"):
        assert await w.run_once() is None
    assert "job claim failed" in caplog.text
    async with engine.begin() as conn:
        await conn.execute(text("ALTER TABLE jobs_away RENAME TO jobs"))
    job = await w.run_once()
    assert job is not None and ran == [job.id]


async def test_a_stalled_job_is_reclaimed_before_its_sessions_next_one_and_blocks_no_other(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """A session's job is running, its worker's lease has run out, and the session's next
    job is due and sorts first. Claiming that next job would make two running jobs of one
    session (the unique index refuses it, and every claim of every worker would fail on
    it); instead the stalled job is reclaimed, and other sessions' jobs still run."""
    sid = await new_session(client, engine)
    stalled = await enqueue(engine, "work", sid)
    async with engine.begin() as conn:
        assert (await queue.claim(conn, worker="gone", lease_s=30)) is not None
        await conn.execute(
            text(
                "UPDATE jobs SET locked_until = now() - interval '1 s',"
                " run_after = now() + interval '1 h' WHERE id = :id"
            ),
            {"id": stalled},
        )
    due = await enqueue(engine, "work", sid)
    other = await enqueue(engine, "work", await new_session(client, engine, "b"))
    assert due is not None and other is not None

    async def claim(name: str) -> int | None:
        async with engine.begin() as conn:
            job = await queue.claim(conn, worker=name, lease_s=30)
        return None if job is None else job.id

    assert {await claim("w1"), await claim("w2")} == {stalled, other}
    assert await claim("w3") is None  # the session's next job waits for the stalled one
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE jobs SET status = 'done' WHERE id = :id"), {"id": stalled})
    assert await claim("w3") == due
    rows = {j["id"]: j for j in await job_rows(engine)}
    assert (rows[stalled]["attempts"], rows[due]["attempts"], rows[other]["attempts"]) == (2, 1, 1)


async def test_only_the_lease_holder_may_finish_or_requeue_a_job(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    job_id = await enqueue(engine, "work", await new_session(client, engine))
    async with engine.begin() as conn:
        assert (await queue.claim(conn, worker="slow", lease_s=30)) is not None
        await conn.execute(
            text("UPDATE jobs SET locked_until = now() - interval '1 s' WHERE id = :id"),
            {"id": job_id},
        )
    async with engine.begin() as conn:
        taken = await queue.claim(conn, worker="rescuer", lease_s=30)
    assert taken is not None and taken.id == job_id
    # The first worker wakes up: its lease is gone, so its outcome is not recorded.
    async with engine.begin() as conn:
        assert await queue.complete(conn, job_id=job_id, worker="slow") is False
        await queue.retry_later(conn, job_id=job_id, worker="slow", delay_s=0, error="late")
    [row] = await job_rows(engine)
    assert (row["status"], row["locked_by"], row["last_error"]) == ("running", "rescuer", None)
    async with engine.begin() as conn:
        assert await queue.complete(conn, job_id=job_id, worker="rescuer") is True


async def test_a_compression_is_claimed_before_older_background_work(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    first = await enqueue(engine, "index_session", await new_session(client, engine, "a"))
    second = await enqueue(engine, "compress", await new_session(client, engine, "b"))
    assert JobKind.COMPRESS.priority > JobKind.INDEX_SESSION.priority
    async with engine.begin() as conn:
        claimed = [await queue.claim(conn, worker="w", lease_s=30) for _ in range(2)]
    assert [j.id for j in claimed if j is not None] == [second, first]


async def test_drain_stops_between_jobs_when_asked(engine: AsyncEngine, settings: Settings) -> None:
    """`mnemo worker --once` runs jobs until none is left, or until SIGTERM sets ``stop``:
    the job running then finishes, the rest stay queued for the next worker."""
    stop = asyncio.Event()
    ran = 0

    async def tick(ctx: JobContext) -> None:
        nonlocal ran
        ran += 1
        stop.set()  # as the signal handler does, while a job runs

    for _ in range(3):
        await enqueue(engine, "tick", None)
    assert await worker(engine, settings, {"tick": tick}).drain(stop) == 1
    assert ran == 1
    assert [j["status"] for j in await job_rows(engine)] == ["done", "queued", "queued"]
    assert await worker(engine, settings, {"tick": tick}).drain(asyncio.Event()) == 2


async def test_the_queue_lag_is_the_wait_of_the_oldest_due_job(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    """What `mnemo serve`'s lag guard reads: how long the job due longest has waited.
    A job waiting out a backoff, one running and one finished are not late."""
    sessions = [await new_session(client, engine, f"lag{i}") for i in range(4)]
    async with engine.connect() as conn:
        assert await queue.oldest_due_s(conn) is None  # nothing due: no lag
    ids = [await enqueue(engine, "compress", sid) for sid in sessions]

    async def due_since(job_id: int | None, seconds: int, status: str = "queued") -> None:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE jobs SET status = :status,"
                    " run_after = now() - make_interval(secs => :s) WHERE id = :id"
                ),
                {"id": job_id, "s": seconds, "status": status},
            )

    await due_since(ids[0], 90)
    await due_since(ids[1], 30)
    await due_since(ids[2], 3600, "done")
    await due_since(ids[3], -600)  # due in ten minutes: a retry's backoff
    async with engine.connect() as conn:
        assert 90 <= (await queue.oldest_due_s(conn) or 0) < 120
    await due_since(ids[0], 600, "running")  # claimed: no longer waiting
    async with engine.connect() as conn:
        assert 30 <= (await queue.oldest_due_s(conn) or 0) < 60

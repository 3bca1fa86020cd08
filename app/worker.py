"""The worker loop: wake on NOTIFY or poll, claim, run, heartbeat, retry or bury.

A handler changes state through ``JobContext.commit`` (``app/services/jobs.py``),
which marks the job done in the same transaction as the effect.

On stop (SIGTERM) the worker claims nothing more, lets its running jobs finish for
``worker_stop_grace_s``, cancels the rest (their transactions roll back: nothing of
them is applied) and hands every job it still holds back to the queue
(``queue.hand_back``): another worker claims them at once, not when their lease
would have expired. A job whose commit went through stays done; one handed back is
run again from the start, so each is applied once.

A job that runs past ``job_timeout_s`` is stopped the same way and counts as a failed
attempt: a handler that hangs (an endpoint that never answers) cannot hold a worker's
slot for good, nor, handed back at every stop with its attempt refunded, run forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core import tracing
from app.core.config import Settings
from app.core.retry import GiveUp, decide_retry
from app.services.jobs import Handler, JobContext, LeaseLost, batch_of
from app.stores import queue
from app.stores.engine import autocommit, renice_backend
from app.stores.queue import Job

log = logging.getLogger(__name__)


class JobTimedOut(Exception):
    """A job ran past ``job_timeout_s`` and was stopped."""


# How long a stopping worker tries to hand its jobs back; past it their leases expire.
HAND_BACK_TIMEOUT_S = 5.0
# How long after a start-up task failed on the database (unavailable, not migrated yet)
# it is tried again.
START_RETRY_S = 30.0


def asyncpg_dsn(engine: AsyncEngine) -> str:
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass
class Worker:
    engine: AsyncEngine
    handlers: Mapping[str, Handler]
    settings: Settings
    name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    on_event: Callable[[str, Job, dict[str, Any]], None] | None = None
    # Housekeeping run every `interval` seconds by each worker (idempotent tasks only).
    periodic: Sequence[tuple[float, Callable[[], Awaitable[Any]]]] = ()
    # Run once when the worker starts (idempotent tasks only; one that fails on the
    # database is tried again START_RETRY_S later).
    at_start: Sequence[Callable[[], Awaitable[Any]]] = ()
    # The niceness its LISTEN connection's backend is given (``renice_backend``; 0: none).
    backend_nice: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set."""
        wake = asyncio.Event()
        listener = asyncio.create_task(self._listen(wake, stop))
        running: set[asyncio.Task[None]] = set()
        capacity = self.settings.worker_concurrency
        due = [time.monotonic() + interval for interval, _ in self.periodic]
        starting, start_due = list(self.at_start), 0.0
        try:
            while not stop.is_set():
                if starting and time.monotonic() >= start_due:
                    starting = await self._run_at_start(starting)
                    start_due = time.monotonic() + START_RETRY_S
                await self._run_periodic(due)
                claimed = False
                while len(running) < capacity and not stop.is_set():
                    job = await self._claim_safely()
                    if job is None:
                        break
                    claimed = True
                    task = asyncio.create_task(self._run_job(job))
                    running.add(task)
                    task.add_done_callback(running.discard)
                    task.add_done_callback(lambda _: wake.set())
                if claimed and len(running) < capacity:
                    continue
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        _first(wake.wait(), stop.wait()), self.settings.job_poll_interval_s
                    )
        finally:
            listener.cancel()
            await self._wind_down(running)
            await asyncio.gather(listener, return_exceptions=True)

    async def _wind_down(self, running: set[asyncio.Task[None]]) -> None:
        """Let the running jobs finish within the grace, stop the others, and hand back
        every job this worker still holds (``queue.hand_back``)."""
        grace = 0.0 if _idle_class() else self.settings.worker_stop_grace_s
        if running and grace > 0:
            await asyncio.wait(list(running), timeout=grace)
        for task in list(running):
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        # Also after no job ran: a claim cut short may have taken a job it never returned.
        try:
            async with asyncio.timeout(HAND_BACK_TIMEOUT_S), self.engine.begin() as conn:
                handed = await queue.hand_back(conn, worker=self.name)
        except (TimeoutError, OSError, DBAPIError, OperationalError) as exc:
            log.warning(
                "could not hand back the jobs of %s (their leases will expire): %s", self.name, exc
            )
            return
        if handed:
            log.info("handed back job(s) %s", handed)

    async def _run_at_start(
        self, tasks: list[Callable[[], Awaitable[Any]]]
    ) -> list[Callable[[], Awaitable[Any]]]:
        """Run ``tasks``; those the database failed are returned, to be tried again."""
        failed = []
        for task in tasks:
            try:
                await task()
            except (OSError, DBAPIError, OperationalError) as exc:
                log.warning("start-up task failed (tried again): %s", exc)
                failed.append(task)
        return failed

    async def _run_periodic(self, due: list[float]) -> None:
        now = time.monotonic()
        for i, (interval, task) in enumerate(self.periodic):
            if now < due[i]:
                continue
            due[i] = now + interval
            try:
                await task()
            except (OSError, DBAPIError, OperationalError) as exc:
                log.warning("periodic task failed: %s", exc)

    async def run_once(self) -> Job | None:
        """Claim and run one job, if any is runnable (tests, `mnemo worker --once`)."""
        job = await self._claim_safely()
        if job is not None:
            await self._run_job(job)
        return job

    async def drain(self, stop: asyncio.Event) -> int:
        """Run the start-up tasks, then jobs one by one until none is runnable or ``stop``
        is set (between jobs: the one running finishes); `mnemo worker --once`. Returns
        how many jobs ran."""
        await self._run_at_start(list(self.at_start))
        ran = 0
        while not stop.is_set() and await self.run_once() is not None:
            ran += 1
        return ran

    async def _claim_safely(self) -> Job | None:
        try:
            # The claim is one statement (atomic on its own): no BEGIN/COMMIT around it.
            async with autocommit(self.engine) as conn:
                return await queue.claim(
                    conn,
                    worker=self.name,
                    lease_s=self.settings.job_lease_s,
                    aging_s=self.settings.job_aging_s,
                )
        except (OSError, DBAPIError, OperationalError) as exc:
            log.warning("job claim failed, database unavailable? %s", exc)
            return None

    async def _run_job(self, job: Job) -> None:
        if job.attempts > job.max_attempts:
            # Claimed again after its lease expired more times than allowed.
            await self._bury(job, "lease expired on the last attempt (worker died?)")
            return
        handler = self.handlers.get(job.kind)
        if handler is None:
            await self._bury(job, f"no handler for job kind {job.kind!r}")
            return
        # A job claimed before (it failed, or its worker died) runs alone: one that fails
        # again fails alone, and holds no batch of other jobs back.
        batch = await self._claim_batch(job, batch_of(handler) if job.attempts == 1 else 1)
        ctx = JobContext(
            engine=self.engine,
            job=job,
            worker=self.name,
            settings=self.settings,
            batch=tuple(batch) if len(batch) > 1 else (),
        )
        heartbeat = asyncio.create_task(self._heartbeat([j.id for j in ctx.jobs]))
        deadline = asyncio.timeout(self.settings.job_timeout_s)
        try:
            with tracing.span(
                f"job {job.kind}",
                kind="consumer",
                link=job.payload.get(tracing.TRACE_KEY),
                attributes={
                    "mnemo.job.id": job.id,
                    "mnemo.job.attempt": job.attempts,
                    "mnemo.job.batch": len(ctx.jobs),
                },
            ):
                async with deadline:
                    await handler(ctx)
            if not ctx.committed:
                async with self.engine.begin() as conn:
                    await queue.complete_all(
                        conn, job_ids=[j.id for j in ctx.pending], worker=self.name
                    )
            for done in ctx.jobs:
                self._emit("done", done, {})
        except asyncio.CancelledError:
            raise
        except LeaseLost as exc:
            log.warning("%s", exc)
            await self._release(ctx.pending, "rolled back with its batch: a lease was lost")
            self._emit("lease_lost", job, {})
        except Exception as exc:  # a handler's failure is the job's, never the worker's
            failure = exc
            if deadline.expired():
                limit = self.settings.job_timeout_s
                failure = JobTimedOut(f"stopped after MNEMO_JOB_TIMEOUT_S ({limit:g} s)")
            for failed in ctx.pending:  # those a commit of their own finished stay done
                await self._after_failure(failed, failure)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

    async def _claim_batch(self, first: Job, size: int) -> list[Job]:
        """``first`` and, for a batch handler, up to ``size`` - 1 more waiting jobs of its
        kind and tenant never claimed before, claimed ``job_batch_wait_s`` later."""
        if size <= 1:
            return [first]
        # The jobs the writes of the next moments queue join this batch, not a next one.
        await asyncio.sleep(self.settings.job_batch_wait_s)
        try:
            async with autocommit(self.engine) as conn:
                more = await queue.claim_more(
                    conn,
                    like=first,
                    n=size - 1,
                    worker=self.name,
                    lease_s=self.settings.job_lease_s,
                )
        except (OSError, DBAPIError, OperationalError) as exc:
            log.warning("batch claim failed, running job %s alone: %s", first.id, exc)
            return [first]
        return [first, *more]

    async def _release(self, jobs: Sequence[Job], error: str) -> None:
        """Back to the queue at once, the jobs of a batch still ours after it failed as a
        whole for another job's sake (the one whose lease was lost is no longer ours)."""
        if len(jobs) < 2:
            return
        try:
            async with self.engine.begin() as conn:
                for job in jobs:
                    await queue.retry_later(
                        conn, job_id=job.id, worker=self.name, delay_s=0.0, error=error
                    )
        except (OSError, DBAPIError, OperationalError):
            log.warning("could not release the batch of job %s", jobs[0].id)

    async def _after_failure(self, job: Job, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        decision = decide_retry(
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            base_s=self.settings.job_backoff_base_s,
            max_s=self.settings.job_backoff_max_s,
        )
        log.warning("job %s (%s) attempt %s failed: %s", job.id, job.kind, job.attempts, error)
        try:
            if isinstance(decision, GiveUp):
                await self._bury(job, f"{error} ({decision.reason})")
                return
            async with self.engine.begin() as conn:
                await queue.retry_later(
                    conn, job_id=job.id, worker=self.name, delay_s=decision, error=error
                )
            self._emit("retry", job, {"delay_s": decision, "error": error})
        except (OSError, DBAPIError, OperationalError):
            # The lease will expire and the job will be claimed again.
            log.warning("could not record the failure of job %s", job.id)

    async def _bury(self, job: Job, error: str) -> None:
        async with self.engine.begin() as conn:
            await queue.bury(conn, job_id=job.id, error=error)
        self._emit("dead", job, {"error": error})

    async def _heartbeat(self, job_ids: list[int]) -> None:
        interval = self.settings.job_lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                async with self.engine.begin() as conn:
                    await queue.extend_lease(
                        conn, job_ids=job_ids, worker=self.name, lease_s=self.settings.job_lease_s
                    )
            except (OSError, DBAPIError, OperationalError):
                log.warning("heartbeat for job(s) %s failed", job_ids)

    async def _listen(self, wake: asyncio.Event, stop: asyncio.Event) -> None:
        """Keep a LISTEN connection open; on any trouble, rely on polling and retry later."""
        while not stop.is_set():
            conn = None
            try:
                conn = await asyncpg.connect(
                    asyncpg_dsn(self.engine),
                    server_settings={"application_name": "mnemo-worker-listen"},
                )
                if self.backend_nice:
                    renice_backend(conn, self.backend_nice)
                await conn.add_listener(queue.CHANNEL, self._on_notify(wake))
                while not stop.is_set() and not conn.is_closed():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.settings.job_poll_interval_s)
            except (OSError, asyncpg.PostgresError) as exc:
                log.debug("LISTEN unavailable (%s); polling only", exc)
                await asyncio.sleep(self.settings.job_poll_interval_s * 5)
            finally:
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=2)

    def _on_notify(self, wake: asyncio.Event) -> Callable[..., None]:
        """The LISTEN callback. A job of a batched kind (embedding) wakes the worker
        ``job_batch_wait_s`` later, not at once: the jobs a burst of writes queues in
        that time are claimed and run together, and the worker leaves the CPU to the
        requests in the meantime. Other kinds (a compression) wake it at once."""
        gathered = {kind for kind, h in self.handlers.items() if batch_of(h) > 1}
        delay = self.settings.job_batch_wait_s
        loop = asyncio.get_running_loop()
        timer: list[asyncio.TimerHandle] = []

        def on_notify(_conn: object, _pid: int, _channel: str, kind: str) -> None:
            if kind not in gathered or delay <= 0:
                wake.set()
            elif not timer or timer[0].when() <= loop.time():
                timer[:] = [loop.call_later(delay, wake.set)]

        return on_notify

    def _emit(self, what: str, job: Job, data: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(what, job, data)


def _idle_class() -> bool:
    """Whether this process runs at SCHED_IDLE (``mnemo serve``'s worker child): it gets
    the CPU only when nothing else wants it, and is stopped when it is starved (the lag
    guard, ``app/supervisor.py``), so a grace would be spent waiting for the CPU while the
    jobs it holds wait for it."""
    idle = getattr(os, "SCHED_IDLE", None)
    return idle is not None and os.sched_getscheduler(0) == idle


async def _first(*aws: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def metrics_on_job_event(metrics: Any) -> Callable[[str, Job, dict[str, Any]], None]:
    """Count job outcomes (done, retry, dead, lease_lost) by kind."""

    def on_event(what: str, job: Job, data: dict[str, Any]) -> None:
        metrics.jobs.labels(job.kind, what).inc()

    return on_event

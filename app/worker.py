"""The worker loop: wake on NOTIFY or poll, claim, run, heartbeat, retry or bury.

A handler changes state through ``JobContext.commit`` (``app/services/jobs.py``),
which marks the job done in the same transaction as the effect.
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
from app.services.jobs import Handler, JobContext, LeaseLost
from app.stores import queue
from app.stores.engine import autocommit
from app.stores.queue import Job

log = logging.getLogger(__name__)


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

    async def run(self, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set."""
        wake = asyncio.Event()
        listener = asyncio.create_task(self._listen(wake, stop))
        running: set[asyncio.Task[None]] = set()
        capacity = self.settings.worker_concurrency
        due = [time.monotonic() + interval for interval, _ in self.periodic]
        try:
            while not stop.is_set():
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
            for task in list(running):
                task.cancel()
            await asyncio.gather(listener, *running, return_exceptions=True)

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
        """Run jobs one by one until none is runnable or ``stop`` is set (between jobs:
        the one running finishes); `mnemo worker --once`. Returns how many ran."""
        ran = 0
        while not stop.is_set() and await self.run_once() is not None:
            ran += 1
        return ran

    async def _claim_safely(self) -> Job | None:
        try:
            # The claim is one statement (atomic on its own): no BEGIN/COMMIT around it.
            async with autocommit(self.engine) as conn:
                return await queue.claim(conn, worker=self.name, lease_s=self.settings.job_lease_s)
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
        ctx = JobContext(engine=self.engine, job=job, worker=self.name, settings=self.settings)
        heartbeat = asyncio.create_task(self._heartbeat(job))
        try:
            with tracing.span(
                f"job {job.kind}",
                kind="consumer",
                link=job.payload.get(tracing.TRACE_KEY),
                attributes={"mnemo.job.id": job.id, "mnemo.job.attempt": job.attempts},
            ):
                await handler(ctx)
            if not ctx.committed:
                async with self.engine.begin() as conn:
                    await queue.complete(conn, job_id=job.id, worker=self.name)
            self._emit("done", job, {})
        except asyncio.CancelledError:
            raise
        except LeaseLost as exc:
            log.warning("%s", exc)
            self._emit("lease_lost", job, {})
        except Exception as exc:  # a handler's failure is the job's, never the worker's
            await self._after_failure(job, exc)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

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

    async def _heartbeat(self, job: Job) -> None:
        interval = self.settings.job_lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                async with self.engine.begin() as conn:
                    await queue.extend_lease(
                        conn, job_id=job.id, worker=self.name, lease_s=self.settings.job_lease_s
                    )
            except (OSError, DBAPIError, OperationalError):
                log.warning("heartbeat for job %s failed", job.id)

    async def _listen(self, wake: asyncio.Event, stop: asyncio.Event) -> None:
        """Keep a LISTEN connection open; on any trouble, rely on polling and retry later."""
        while not stop.is_set():
            conn = None
            try:
                conn = await asyncpg.connect(asyncpg_dsn(self.engine))
                await conn.add_listener(queue.CHANNEL, lambda *_: wake.set())
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

    def _emit(self, what: str, job: Job, data: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(what, job, data)


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

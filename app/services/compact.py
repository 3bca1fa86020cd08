"""Compress now: schedule the session's compression and, if asked, wait for it."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.compression.audit import Event
from app.core.errors import Conflict
from app.core.jobs import JobKind
from app.stores import events, queue, sessions

log = logging.getLogger(__name__)

WAIT_POLL_S = 0.05

# A queued compression can be claimed between our failed insert and our look-up;
# the next insert then succeeds (or finds the one queued meanwhile).
ENQUEUE_ATTEMPTS = 3


@dataclass(frozen=True)
class Scheduled:
    session_pk: int
    job_id: int


@dataclass(frozen=True)
class Outcome:
    """How a waited-for compression ended: still running when the wait ran out
    (``scheduled``), committed with its event, done with nothing to compress, or dead."""

    status: Literal["scheduled", "compressed", "nothing_to_compress", "failed"]
    job_id: int
    event: Event | None = None


async def schedule(
    engine: AsyncEngine, *, tenant: str, session: str, max_attempts: int
) -> Scheduled:
    async with engine.begin() as conn:
        sid = await sessions.session_pk(conn, tenant=tenant, session=session)
        await sessions.lock_for_compaction(conn, session_pk=sid)
        job_id = await _manual_compression(conn, tenant=tenant, sid=sid, max_attempts=max_attempts)
    return Scheduled(session_pk=sid, job_id=job_id)


async def wait(engine: AsyncEngine, scheduled: Scheduled, *, timeout_s: float) -> Outcome:
    """Poll the job until it is done or dead, or ``timeout_s`` has passed."""
    job_id, sid = scheduled.job_id, scheduled.session_pk
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        async with engine.connect() as conn:
            job = await queue.job_status(conn, job_id=job_id)
            if job.status == "done":
                event_id = await events.event_for_job(conn, session_pk=sid, job_id=job_id)
                if event_id is None:
                    return Outcome("nothing_to_compress", job_id)
                event = await events.get_event(conn, session_pk=sid, event_id=event_id)
                return Outcome("compressed", job_id, event)
            if job.status == "dead":
                log.warning("compression job %s failed: %s", job_id, job.last_error)
                return Outcome("failed", job_id)
        await asyncio.sleep(WAIT_POLL_S)
    return Outcome("scheduled", job_id)


async def _manual_compression(
    conn: AsyncConnection, *, tenant: str, sid: int, max_attempts: int
) -> int:
    """The job that will compress the session now: a new one, the one already
    waiting (made manual), or — when a worker claims that one under our feet and
    no other can be queued — the one running."""
    for _ in range(ENQUEUE_ATTEMPTS):
        job_id = await queue.enqueue(
            conn,
            tenant_id=tenant,
            session_id=sid,
            kind=JobKind.COMPRESS,
            payload={"trigger": "manual"},
            max_attempts=max_attempts,
        )
        if job_id is not None:
            return job_id
        queued = await queue.queued_compression(conn, session_pk=sid)
        if queued is not None:
            await queue.make_manual(conn, job_id=queued)
            return queued
    running = await queue.running_compression(conn, session_pk=sid)
    if running is None:
        raise Conflict("the session's compression queue changed too often; retry")
    return running

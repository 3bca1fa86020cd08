"""Compress now, and the audit trail of compressions."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.api.deps import (
    INT8_MAX,
    EngineDep,
    EventIdPath,
    ReadConnDep,
    SessionIdPath,
    SettingsDep,
    TenantDep,
)
from app.api.problems import COMMON_PROBLEMS
from app.core.errors import Conflict, MnemoError
from app.stores import events, queue, sessions

log = logging.getLogger(__name__)

router = APIRouter(
    prefix="/v1/sessions",
    tags=["compression"],
    responses={**COMMON_PROBLEMS},
)

WAIT_POLL_S = 0.05

# queued_compression: the compression already waiting for this session, if any.
QUEUED_COMPRESSION = text("""
    SELECT id FROM jobs WHERE session_id = :sid AND kind = 'compress' AND status = 'queued'
""")

# make_manual: a waiting tiered compression becomes the "compress now" one asked for.
MAKE_MANUAL = text("""
    UPDATE jobs SET payload = jsonb_set(payload, '{trigger}', '"manual"'), run_after = now()
    WHERE id = :id AND status = 'queued'
""")

# running_compression: the compression of this session a worker is running now.
RUNNING_COMPRESSION = text("""
    SELECT id FROM jobs WHERE session_id = :sid AND kind = 'compress' AND status = 'running'
""")

JOB_STATUS = text("SELECT status, last_error FROM jobs WHERE id = :id")

# lock_session: taken before the job insert, in the order ingest takes its locks (the
# session row, then the job). Otherwise a post holding the row and inserting its own
# job, and this insert waiting on the row for its foreign key, deadlock.
LOCK_SESSION = text("SELECT 1 FROM sessions WHERE id = :sid FOR UPDATE")

# A queued compression can be claimed between our failed insert and our look-up;
# the next insert then succeeds (or finds the one queued meanwhile).
ENQUEUE_ATTEMPTS = 3


class CompressionFailed(MnemoError):
    status = 500
    title = "Compression failed"
    slug = "compression-failed"

    @property
    def public_detail(self) -> str:
        return self.detail  # the job id only; the job's error text stays in the log


@router.post(
    "/{session_id}/compact",
    status_code=202,
    responses={200: {"description": "Compressed (wait=true): the event"}},
)
async def compact(
    session_id: SessionIdPath,
    engine: EngineDep,
    tenant: TenantDep,
    settings: SettingsDep,
    wait: bool = False,
    timeout_s: Annotated[float, Query(gt=0, le=300)] = 60.0,
) -> JSONResponse:
    """Compress now: all live turns but the working window.

    202 with the job id; with ``wait=true``, 200 once the compression is committed
    (the event), or 202 if it has not finished within ``timeout_s``.
    """
    async with engine.begin() as conn:
        sid = await sessions.session_pk(conn, tenant=tenant, session=session_id)
        await conn.execute(LOCK_SESSION, {"sid": sid})
        job_id = await _manual_compression(
            conn, tenant=tenant, sid=sid, max_attempts=settings.job_max_attempts
        )
    scheduled = {"status": "scheduled", "job_id": job_id}
    if not wait:
        return JSONResponse(scheduled, status_code=202)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        async with engine.connect() as conn:
            job = (await conn.execute(JOB_STATUS, {"id": job_id})).one()
            if job.status == "done":
                event_id = await events.event_for_job(conn, session_pk=sid, job_id=job_id)
                if event_id is None:
                    return JSONResponse(
                        {"status": "nothing_to_compress", "job_id": job_id}, status_code=200
                    )
                event = await events.get_event(conn, session_pk=sid, event_id=event_id)
                return JSONResponse(_jsonable({"status": "compressed", **event}), status_code=200)
            if job.status == "dead":
                log.warning("compression job %s failed: %s", job_id, job.last_error)
                raise CompressionFailed(f"compression job {job_id} failed")
        await asyncio.sleep(WAIT_POLL_S)
    return JSONResponse(scheduled, status_code=202)


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
            kind="compress",
            payload={"trigger": "manual"},
            max_attempts=max_attempts,
        )
        if job_id is not None:
            return job_id
        queued = (await conn.execute(QUEUED_COMPRESSION, {"sid": sid})).scalar_one_or_none()
        if queued is not None:
            await conn.execute(MAKE_MANUAL, {"id": queued})
            return int(queued)
    running = (await conn.execute(RUNNING_COMPRESSION, {"sid": sid})).scalar_one_or_none()
    if running is None:
        raise Conflict("the session's compression queue changed too often; retry")
    return int(running)


@router.get("/{session_id}/events")
async def list_events(
    session_id: SessionIdPath,
    conn: ReadConnDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[int | None, Query(ge=1, le=INT8_MAX)] = None,
) -> dict[str, Any]:
    """The session's compressions, newest first (page with ``before`` = the last id seen)."""
    sid = await sessions.session_pk(conn, tenant=tenant, session=session_id)
    return {"events": await events.list_events(conn, session_pk=sid, limit=limit, before=before)}


@router.get("/{session_id}/events/{event_id}")
async def get_event(
    session_id: SessionIdPath, event_id: EventIdPath, conn: ReadConnDep, tenant: TenantDep
) -> dict[str, Any]:
    """One compression: its input turns, extracted units, rendered state and figures."""
    sid = await sessions.session_pk(conn, tenant=tenant, session=session_id)
    return await events.get_event(conn, session_pk=sid, event_id=event_id)


def _jsonable(value: dict[str, Any]) -> dict[str, Any]:
    encoded: dict[str, Any] = jsonable_encoder(value)
    return encoded

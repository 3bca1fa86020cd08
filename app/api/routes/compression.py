"""Compress now, and the audit trail of compressions."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

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
from app.core.errors import MnemoError
from app.services import compact as compact_now
from app.stores import events, sessions

router = APIRouter(
    prefix="/v1/sessions",
    tags=["compression"],
    responses={**COMMON_PROBLEMS},
)


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
    scheduled = await compact_now.schedule(
        engine, tenant=tenant, session=session_id, max_attempts=settings.job_max_attempts
    )
    accepted = {"status": "scheduled", "job_id": scheduled.job_id}
    if not wait:
        return JSONResponse(accepted, status_code=202)
    outcome = await compact_now.wait(engine, scheduled, timeout_s=timeout_s)
    if outcome.status == "compressed":
        event = outcome.event or {}
        return JSONResponse(_jsonable({"status": "compressed", **event}), status_code=200)
    if outcome.status == "nothing_to_compress":
        return JSONResponse({"status": "nothing_to_compress", "job_id": outcome.job_id}, 200)
    if outcome.status == "failed":
        raise CompressionFailed(f"compression job {outcome.job_id} failed")
    return JSONResponse(accepted, status_code=202)


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

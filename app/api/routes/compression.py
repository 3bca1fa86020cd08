"""Compress now, and the audit trail of compressions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from app.api.deps import (
    INT8_MAX,
    EngineDep,
    EventIdPath,
    ReadConnDep,
    SessionIdPath,
    SettingsDep,
    TenantDep,
    own_session,
)
from app.api.problems import COMMON_PROBLEMS
from app.api.schemas import (
    Compacted,
    CompactScheduled,
    EventOut,
    EventsOut,
    EventSummaryOut,
    NothingToCompress,
)
from app.core.errors import MnemoError
from app.services import compact as compact_now
from app.stores import events, sessions

router = APIRouter(
    prefix="/v1/sessions",
    tags=["compression"],
    responses={**COMMON_PROBLEMS},
    dependencies=[Depends(own_session)],
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
    response_model=CompactScheduled,
    responses={
        200: {
            "description": "Compressed (wait=true): the event, or nothing to compress",
            "model": Compacted | NothingToCompress,
        }
    },
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
    accepted = CompactScheduled(status="scheduled", job_id=scheduled.job_id).model_dump()
    if not wait:
        return JSONResponse(accepted, status_code=202)
    outcome = await compact_now.wait(engine, scheduled, timeout_s=timeout_s)
    if outcome.status == "compressed" and outcome.event is not None:
        event = EventOut.model_validate(outcome.event).model_dump(mode="json")
        return JSONResponse({"status": "compressed", **event}, status_code=200)
    if outcome.status == "nothing_to_compress":
        nothing = NothingToCompress(status="nothing_to_compress", job_id=outcome.job_id)
        return JSONResponse(nothing.model_dump(), status_code=200)
    if outcome.status == "failed":
        raise CompressionFailed(f"compression job {outcome.job_id} failed")
    return JSONResponse(accepted, status_code=202)


@router.get("/{session_id}/events", response_model=EventsOut)
async def list_events(
    session_id: SessionIdPath,
    conn: ReadConnDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[int | None, Query(ge=1, le=INT8_MAX)] = None,
) -> EventsOut:
    """The session's compressions, newest first (page with ``before`` = the last id seen)."""
    sid = await sessions.session_pk(conn, tenant=tenant, session=session_id)
    found = await events.list_events(conn, session_pk=sid, limit=limit, before=before)
    return EventsOut(events=[EventSummaryOut.model_validate(e) for e in found])


@router.get("/{session_id}/events/{event_id}", response_model=EventOut)
async def get_event(
    session_id: SessionIdPath, event_id: EventIdPath, conn: ReadConnDep, tenant: TenantDep
) -> EventOut:
    """One compression: its input turns, extracted units, rendered state and figures."""
    sid = await sessions.session_pk(conn, tenant=tenant, session=session_id)
    return EventOut.model_validate(await events.get_event(conn, session_pk=sid, event_id=event_id))

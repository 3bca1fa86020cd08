"""Reading the audit trail of compressions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.audit import Event, EventSummary, as_trigger
from app.core.errors import NotFound

SUMMARY_COLUMNS = """
    e.id, e.created_at, e.trigger, e.tier, e.state_version, e.input_tokens, e.output_tokens,
    e.ratio, e.duration_ms, e.extractor, e.fallback_reason, e.change_summary, e.job_id,
    jsonb_array_length(e.turn_seqs) AS turn_count
"""

# list_events: a session's compressions, newest first.
LIST_EVENTS = text(f"""
    SELECT {SUMMARY_COLUMNS}
    FROM compression_events e
    WHERE e.session_id = :sid AND e.id < :before
    ORDER BY e.id DESC
    LIMIT :limit
""")

# get_event: one compression with its inputs, units and rendering.
GET_EVENT = text(f"""
    SELECT {SUMMARY_COLUMNS}, e.turn_ids, e.turn_seqs, e.units, e.rendered_state
    FROM compression_events e
    WHERE e.session_id = :sid AND e.id = :id
""")

# event_by_job: the event a compression job wrote, if any.
EVENT_BY_JOB = text("SELECT id FROM compression_events WHERE session_id = :sid AND job_id = :job")


def _summary_fields(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "created_at": row.created_at,
        "trigger": as_trigger(row.trigger),
        "tier": row.tier,
        "state_version": row.state_version,
        "turn_count": row.turn_count,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "ratio": row.ratio,
        "duration_ms": row.duration_ms,
        "extractor": row.extractor,
        "fallback_reason": row.fallback_reason,
        "change_summary": row.change_summary,
        "job_id": row.job_id,
    }


async def list_events(
    conn: AsyncConnection, *, session_pk: int, limit: int, before: int | None
) -> list[EventSummary]:
    rows = await conn.execute(
        LIST_EVENTS, {"sid": session_pk, "limit": limit, "before": before or 2**62}
    )
    return [EventSummary(**_summary_fields(r)) for r in rows]


async def get_event(conn: AsyncConnection, *, session_pk: int, event_id: int) -> Event:
    row = (await conn.execute(GET_EVENT, {"sid": session_pk, "id": event_id})).first()
    if row is None:
        raise NotFound(f"event {event_id} not found in this session")
    return Event(
        **_summary_fields(row),
        turn_ids=row.turn_ids,
        turn_seqs=row.turn_seqs,
        units=row.units,
        rendered_state=row.rendered_state,
    )


async def event_for_job(conn: AsyncConnection, *, session_pk: int, job_id: int) -> int | None:
    found = (await conn.execute(EVENT_BY_JOB, {"sid": session_pk, "job": job_id})).scalar()
    return None if found is None else int(found)

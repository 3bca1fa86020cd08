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
    e.llm_prompt_tokens, e.llm_completion_tokens,
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
        "llm_prompt_tokens": row.llm_prompt_tokens,
        "llm_completion_tokens": row.llm_completion_tokens,
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


# --- The inspector's reads ------------------------------------------------------------

# timeline_events: every compression of a session, oldest first, with the seq span it took.
TIMELINE_EVENTS = text(f"""
    SELECT {SUMMARY_COLUMNS},
           (SELECT min(x::int) FROM jsonb_array_elements_text(e.turn_seqs) x) AS first_seq,
           (SELECT max(x::int) FROM jsonb_array_elements_text(e.turn_seqs) x) AS last_seq
    FROM compression_events e
    WHERE e.session_id = :sid
    ORDER BY e.id
""")

# event_states: the state a compression committed, the state it started from (the one
# the previous version committed), and both renderings.
EVENT_STATES = text("""
    SELECT e.state AS after, e.rendered_state AS rendered_after,
           p.state AS before, p.rendered_state AS rendered_before, e.state_version
    FROM compression_events e
    LEFT JOIN LATERAL (
        SELECT state, rendered_state FROM compression_events
        WHERE session_id = e.session_id AND state_version = e.state_version - 1
        ORDER BY id DESC LIMIT 1) p ON true
    WHERE e.session_id = :sid AND e.id = :id
""")


async def timeline_events(conn: AsyncConnection, *, session_pk: int) -> list[dict[str, Any]]:
    return [
        {
            **_summary_fields(r),
            "first_seq": r.first_seq,
            "last_seq": r.last_seq,
        }
        for r in await conn.execute(TIMELINE_EVENTS, {"sid": session_pk})
    ]


async def event_states(conn: AsyncConnection, *, session_pk: int, event_id: int) -> dict[str, Any]:
    """``before``/``after`` states (None where not stored) and renderings of one event."""
    row = (await conn.execute(EVENT_STATES, {"sid": session_pk, "id": event_id})).first()
    if row is None:
        raise NotFound(f"event {event_id} not found in this session")
    first = row.state_version == 1
    return {
        "after": row.after if row.after is not None else None,
        "before": {} if first else (row.before if row.before is not None else None),
        "rendered_after": row.rendered_after,
        "rendered_before": "" if first else (row.rendered_before or ""),
    }

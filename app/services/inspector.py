"""Use cases of the inspector (/ui): what an operator reads about sessions, memories
and the queue, and the few things they may do. Values out, never HTML or API schemas."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.state_diff import Change, line_changes, state_changes
from app.providers.embed import Embedder
from app.services.memories import hybrid_search
from app.stores import events, memories, queue, sessions
from app.stores.memories import MemoryRow
from app.stores.queue import JobRow, KindStats
from app.stores.sessions import SessionRow, TimelineTurn

TIMELINE_PAGE = 200  # turns per page of a session's timeline
DEAD_SHOWN = 100


@dataclass
class ToolPair:
    call: dict[str, Any]
    results: list[TimelineTurn] = field(default_factory=list)


@dataclass
class TurnEntry:
    """One turn of the timeline; an assistant turn with tool calls carries their results."""

    turn: TimelineTurn
    pairs: list[ToolPair] = field(default_factory=list)


@dataclass(frozen=True)
class EventEntry:
    """A compression, placed after the last turn it took."""

    event: dict[str, Any]


@dataclass(frozen=True)
class EventDiff:
    event: dict[str, Any]
    changes: list[Change]
    structured: bool  # False: a diff of the renderings (the event kept no state)
    rendered_before: str
    rendered_after: str


@dataclass(frozen=True)
class SessionView:
    row: SessionRow
    entries: list[TurnEntry | EventEntry]
    events: list[dict[str, Any]]
    after_seq: int
    next_after_seq: int | None
    last_diff: EventDiff | None


def timeline(
    turns: list[TimelineTurn], compressions: list[dict[str, Any]]
) -> list[TurnEntry | EventEntry]:
    """Turns in order, tool results under the call that asked for them, and each
    compression right after the last turn it consumed."""
    by_last: dict[int, list[dict[str, Any]]] = {}
    for e in compressions:
        if e.get("last_seq") is not None:
            by_last.setdefault(int(e["last_seq"]), []).append(e)
    entries: list[TurnEntry | EventEntry] = []
    open_calls: dict[str, ToolPair] = {}
    for t in turns:
        pair = open_calls.get(t.tool_call_id or "") if t.role == "tool" else None
        if pair is not None:
            pair.results.append(t)
        else:
            entry = TurnEntry(turn=t)
            for call in t.tool_calls or []:
                entry.pairs.append(ToolPair(call=call))
                open_calls[str(call.get("id", ""))] = entry.pairs[-1]
            entries.append(entry)
        entries.extend(EventEntry(e) for e in by_last.pop(t.seq, []))
    return entries


async def session_view(
    conn: AsyncConnection, *, tenant: str, session: str, after_seq: int = 0
) -> SessionView:
    row = await sessions.session_row(conn, tenant=tenant, session=session)
    turns = await sessions.timeline_turns(
        conn, session_pk=row.pk, after_seq=after_seq, limit=TIMELINE_PAGE + 1
    )
    more = len(turns) > TIMELINE_PAGE
    turns = turns[:TIMELINE_PAGE]
    compressions = await events.timeline_events(conn, session_pk=row.pk)
    last = (
        await event_diff(conn, session_pk=row.pk, event=compressions[-1]) if compressions else None
    )
    return SessionView(
        row=row,
        entries=timeline(turns, compressions),
        events=compressions,
        after_seq=after_seq,
        next_after_seq=turns[-1].seq if more and turns else None,
        last_diff=last,
    )


async def event_diff(conn: AsyncConnection, *, session_pk: int, event: dict[str, Any]) -> EventDiff:
    states = await events.event_states(conn, session_pk=session_pk, event_id=event["id"])
    before, after = states["before"], states["after"]
    structured = before is not None and after is not None
    changes = (
        state_changes(before, after)
        if structured
        else line_changes(states["rendered_before"], states["rendered_after"])
    )
    return EventDiff(
        event=event,
        changes=changes,
        structured=structured,
        rendered_before=states["rendered_before"],
        rendered_after=states["rendered_after"],
    )


async def event_view(
    conn: AsyncConnection, *, tenant: str, session: str, event_id: int
) -> tuple[SessionRow, EventDiff, dict[str, Any]]:
    """A session's compression: its figures, its diff and its full record (units…)."""
    row = await sessions.session_row(conn, tenant=tenant, session=session)
    full = await events.get_event(conn, session_pk=row.pk, event_id=event_id)
    record = dataclasses.asdict(full)
    return row, await event_diff(conn, session_pk=row.pk, event=record), record


@dataclass(frozen=True)
class UserView:
    user: str
    memories: list[MemoryRow]
    query: str
    kind: str | None
    sessions: list[SessionRow]


async def user_view(
    conn: AsyncConnection,
    *,
    tenant: str,
    user: str,
    query: str = "",
    kind: str | None = None,
    embedder: Embedder | None,
    limit: int = 200,
) -> UserView | None:
    """The user's memories (the best matches of ``query`` by the same hybrid retrieval
    as /context, else the newest) and sessions; None for an unknown user."""
    user_pk = await sessions.user_pk(conn, tenant=tenant, user=user)
    if user_pk is None:
        return None
    if query.strip():
        rows = await hybrid_search(
            conn, user_pk=user_pk, query=query, k=min(limit, 50), kind=kind, embedder=embedder
        )
    else:
        rows = await memories.list_memories(conn, user_pk=user_pk, kind=kind, limit=limit)
    own = await sessions.user_sessions(conn, tenant=tenant, user=user, limit=50)
    return UserView(user=user, memories=rows, query=query, kind=kind, sessions=own)


@dataclass(frozen=True)
class QueueView:
    kinds: list[KindStats]
    running: list[JobRow]
    dead: list[JobRow]


async def queue_view(conn: AsyncConnection, *, tenant: str) -> QueueView:
    return QueueView(
        kinds=await queue.kind_stats(conn, tenant=tenant),
        running=await queue.list_jobs(conn, tenant=tenant, status="running", limit=100),
        dead=await queue.list_jobs(conn, tenant=tenant, status="dead", limit=DEAD_SHOWN),
    )

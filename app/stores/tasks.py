"""Tasks, their members, their shared state and its audit: the SQL that owns them.

The session columns tasks add (``sessions.task_id``, ``sessions.agent``) are read
here and written by ``stores/sessions.py``, the sessions table's owner. Every
statement filters by tenant (directly or through a row found by tenant).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.shared import SharedState
from app.core.errors import Conflict, NotFound
from app.core.permissions import Membership


@dataclass(frozen=True)
class TaskRow:
    pk: int
    task_id: str
    created_at: datetime
    updated_at: datetime
    version: int


@dataclass(frozen=True)
class TaskSession:
    session_id: str
    agent: str | None


@dataclass(frozen=True)
class SessionTask:
    """The task a session works on, as its compression sees it."""

    task_pk: int
    session_id: str
    agent: str | None
    member: Membership | None


# create_task: a new task of the tenant; nothing when the id is taken.
CREATE_TASK = text("""
    INSERT INTO tasks (tenant_id, external_id) VALUES (:tenant, :task)
    ON CONFLICT (tenant_id, external_id) DO NOTHING
    RETURNING id, external_id, created_at, updated_at, version
""")

TASK_BY_ID = text("""
    SELECT id, external_id, created_at, updated_at, version
    FROM tasks WHERE tenant_id = :tenant AND external_id = :task
""")

# set_member: an agent's role on a task (replaces the previous one).
SET_MEMBER = text("""
    INSERT INTO task_members (task_id, agent, role, sections)
    VALUES (:tid, :agent, :role, CAST(:sections AS text[]))
    ON CONFLICT (task_id, agent) DO UPDATE SET role = EXCLUDED.role, sections = EXCLUDED.sections
""")

MEMBERS = text("""
    SELECT agent, role, sections FROM task_members WHERE task_id = :tid ORDER BY created_at, agent
""")

MEMBER = text(
    "SELECT agent, role, sections FROM task_members WHERE task_id = :tid AND agent = :agent"
)

TASK_SESSIONS = text("""
    SELECT external_id, agent FROM sessions WHERE task_id = :tid ORDER BY id
""")

# session_for_attach: the session, locked, with its task and agent.
SESSION_FOR_ATTACH = text("""
    SELECT id, task_id, agent FROM sessions
    WHERE tenant_id = :tenant AND external_id = :session
    FOR UPDATE
""")

SESSION_AGENT = text("""
    SELECT agent FROM sessions WHERE tenant_id = :tenant AND external_id = :session
""")

# session_task: what a compression of this session needs to know about its task.
SESSION_TASK = text("""
    SELECT s.task_id, s.external_id, s.agent, m.role, m.sections
    FROM sessions s
    LEFT JOIN task_members m ON m.task_id = s.task_id AND m.agent = s.agent
    WHERE s.id = :sid AND s.task_id IS NOT NULL
""")

SHARED = text("""
    SELECT version, state, rendered, updated_at FROM tasks WHERE id = :tid
""")

# lock_shared: every contribution to a task's shared state serialises on its row,
# so concurrent compressions of sibling sessions each merge into the latest state.
LOCK_SHARED = text("SELECT version, state FROM tasks WHERE id = :tid FOR UPDATE")

WRITE_SHARED = text("""
    UPDATE tasks SET version = :version, state = :state, rendered = :rendered,
                     renderings = :renderings, updated_at = now()
    WHERE id = :tid
""")

INSERT_TASK_EVENT = text("""
    INSERT INTO task_events (task_id, session_id, agent, version, units, change_summary,
                             compression_event_id)
    VALUES (:tid, :sid, :agent, :version, :units, :change_summary, :event_id)
    RETURNING id
""")

# task_events_page: contributions, newest first, keyset-paginated by id.
TASK_EVENTS = text("""
    SELECT e.id, e.created_at, e.agent, s.external_id AS session_id, e.version, e.units,
           e.change_summary
    FROM task_events e LEFT JOIN sessions s ON s.id = e.session_id
    WHERE e.task_id = :tid AND (CAST(:before AS bigint) IS NULL OR e.id < :before)
    ORDER BY e.id DESC
    LIMIT :limit
""")


def _task(row: Any) -> TaskRow:
    return TaskRow(
        pk=row.id,
        task_id=row.external_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        version=row.version,
    )


def _member(row: Any) -> Membership:
    sections = tuple(row.sections) if row.sections is not None else None
    return Membership(agent=row.agent, role=row.role, sections=sections)


async def create_task(conn: AsyncConnection, *, tenant: str, task: str) -> TaskRow:
    row = (await conn.execute(CREATE_TASK, {"tenant": tenant, "task": task})).first()
    if row is None:
        raise Conflict(f"task {task!r} exists")
    return _task(row)


async def find_task(conn: AsyncConnection, *, tenant: str, task: str) -> TaskRow:
    row = (await conn.execute(TASK_BY_ID, {"tenant": tenant, "task": task})).first()
    if row is None:
        raise NotFound(f"task {task!r} not found")
    return _task(row)


async def set_member(conn: AsyncConnection, *, task_pk: int, member: Membership) -> None:
    sections = list(member.sections) if member.sections is not None else None
    await conn.execute(
        SET_MEMBER,
        {"tid": task_pk, "agent": member.agent, "role": member.role, "sections": sections},
    )


async def members(conn: AsyncConnection, *, task_pk: int) -> list[Membership]:
    return [_member(r) for r in await conn.execute(MEMBERS, {"tid": task_pk})]


async def member(conn: AsyncConnection, *, task_pk: int, agent: str) -> Membership | None:
    row = (await conn.execute(MEMBER, {"tid": task_pk, "agent": agent})).first()
    return _member(row) if row is not None else None


async def sessions_of(conn: AsyncConnection, *, task_pk: int) -> list[TaskSession]:
    return [
        TaskSession(session_id=r.external_id, agent=r.agent)
        for r in await conn.execute(TASK_SESSIONS, {"tid": task_pk})
    ]


@dataclass(frozen=True)
class SessionRef:
    pk: int
    task_pk: int | None
    agent: str | None


async def lock_session(conn: AsyncConnection, *, tenant: str, session: str) -> SessionRef:
    row = (await conn.execute(SESSION_FOR_ATTACH, {"tenant": tenant, "session": session})).first()
    if row is None:
        raise NotFound(f"session {session!r} not found")
    return SessionRef(pk=row.id, task_pk=row.task_id, agent=row.agent)


async def session_agent(
    conn: AsyncConnection, *, tenant: str, session: str
) -> tuple[bool, str | None]:
    """(whether the session exists, the agent it belongs to)."""
    row = (await conn.execute(SESSION_AGENT, {"tenant": tenant, "session": session})).first()
    return (False, None) if row is None else (True, row.agent)


async def session_task(conn: AsyncConnection, *, session_pk: int) -> SessionTask | None:
    row = (await conn.execute(SESSION_TASK, {"sid": session_pk})).first()
    if row is None:
        return None
    found = _member(row) if row.role is not None else None
    return SessionTask(
        task_pk=row.task_id, session_id=row.external_id, agent=row.agent, member=found
    )


@dataclass(frozen=True)
class SharedRow:
    version: int
    shared: SharedState
    rendered: str
    updated_at: datetime


async def shared(conn: AsyncConnection, *, task_pk: int) -> SharedRow:
    row = (await conn.execute(SHARED, {"tid": task_pk})).one()
    return SharedRow(
        version=row.version,
        shared=SharedState.model_validate(row.state or {}),
        rendered=row.rendered,
        updated_at=row.updated_at,
    )


async def lock_shared(conn: AsyncConnection, *, task_pk: int) -> tuple[int, SharedState]:
    row = (await conn.execute(LOCK_SHARED, {"tid": task_pk})).one()
    return row.version, SharedState.model_validate(row.state or {})


async def write_shared(
    conn: AsyncConnection,
    *,
    task_pk: int,
    version: int,
    shared: SharedState,
    renderings: list[str],
) -> None:
    await conn.execute(
        WRITE_SHARED,
        {
            "tid": task_pk,
            "version": version,
            "state": shared.model_dump(mode="json"),
            "rendered": renderings[0] if renderings else "",
            "renderings": renderings[1:],
        },
    )


async def add_event(
    conn: AsyncConnection,
    *,
    task_pk: int,
    session_pk: int,
    agent: str,
    version: int,
    units: int,
    change_summary: str,
    event_id: int | None,
) -> int:
    params = {
        "tid": task_pk,
        "sid": session_pk,
        "agent": agent,
        "version": version,
        "units": units,
        "change_summary": change_summary,
        "event_id": event_id,
    }
    return int((await conn.execute(INSERT_TASK_EVENT, params)).scalar_one())


async def events(
    conn: AsyncConnection, *, task_pk: int, limit: int, before: int | None
) -> list[dict[str, Any]]:
    rows = await conn.execute(TASK_EVENTS, {"tid": task_pk, "limit": limit, "before": before})
    return [dict(r._mapping) for r in rows]

"""Use cases of tasks shared by sessions: create, set roles, attach, read, contribute.

Permission rules are ``app.core.permissions``; the merge is ``app.compression.shared``;
the SQL is ``app.stores.tasks``. These functions return domain values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.diff import diff_summary
from app.compression.ledger import ToolKind
from app.compression.render import render_tiers
from app.compression.shared import (
    Attribution,
    Contributor,
    attribution,
    contribute,
    retitled,
    shared_units,
)
from app.compression.state import Language, TaskState, Unit
from app.core.errors import Conflict, Forbidden, NotFound
from app.core.permissions import (
    Membership,
    Section,
    manages_tasks,
    sees_session,
    sees_task,
    writable,
)
from app.stores import sessions as sessions_store
from app.stores import tasks as store


@dataclass(frozen=True)
class Task:
    task_id: str
    created_at: datetime
    updated_at: datetime
    version: int
    members: list[Membership]
    sessions: list[store.TaskSession]


@dataclass(frozen=True)
class SharedView:
    task_id: str
    version: int
    state: TaskState
    attribution: list[Attribution]
    rendered: str
    updated_at: datetime


def _refuse_bound(agent: str | None) -> None:
    if not manages_tasks(agent):
        raise Forbidden("creating tasks and setting roles needs a key not bound to an agent")


async def _visible(conn: AsyncConnection, *, tenant: str, task: str, agent: str | None) -> int:
    """The task's pk if the caller may see it; otherwise 404, as if it did not exist."""
    row = await store.find_task(conn, tenant=tenant, task=task)
    if agent is not None:
        names = [m.agent for m in await store.members(conn, task_pk=row.pk)]
        if not sees_task(agent, names):
            raise NotFound(f"task {task!r} not found")
    return row.pk


async def create(
    conn: AsyncConnection,
    *,
    tenant: str,
    caller: str | None,
    task: str,
    members: Sequence[Membership],
) -> Task:
    _refuse_bound(caller)
    row = await store.create_task(conn, tenant=tenant, task=task)
    for m in members:
        await store.set_member(conn, task_pk=row.pk, member=m)
    return await read(conn, tenant=tenant, caller=caller, task=task)


async def read(conn: AsyncConnection, *, tenant: str, caller: str | None, task: str) -> Task:
    pk = await _visible(conn, tenant=tenant, task=task, agent=caller)
    row = await store.find_task(conn, tenant=tenant, task=task)
    return Task(
        task_id=row.task_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        version=row.version,
        members=await store.members(conn, task_pk=pk),
        sessions=await store.sessions_of(conn, task_pk=pk),
    )


async def set_role(
    conn: AsyncConnection, *, tenant: str, caller: str | None, task: str, member: Membership
) -> Task:
    _refuse_bound(caller)
    row = await store.find_task(conn, tenant=tenant, task=task)
    await store.set_member(conn, task_pk=row.pk, member=member)
    return await read(conn, tenant=tenant, caller=caller, task=task)


async def attach(
    conn: AsyncConnection,
    *,
    tenant: str,
    caller: str | None,
    task: str,
    session: str,
    agent: str | None,
) -> Task:
    """Put a session on a task (one task per session), as the work of ``agent``.

    A bound key attaches its own sessions as its own agent; an unbound key names the
    agent (or the session already has one). The agent must be a member of the task.
    """
    pk = await _visible(conn, tenant=tenant, task=task, agent=caller)
    if caller is not None and agent is not None and agent != caller:
        raise Forbidden("a key bound to an agent attaches sessions as that agent only")
    ref = await store.lock_session(conn, tenant=tenant, session=session)
    if not sees_session(caller, ref.agent):
        raise NotFound(f"session {session!r} not found")
    who = caller or agent or ref.agent
    if who is None:
        raise Conflict('name the agent the session belongs to ("agent")')
    if ref.agent is not None and ref.agent != who:
        raise Conflict(f"session {session!r} belongs to agent {ref.agent!r}")
    if ref.task_pk is not None and ref.task_pk != pk:
        raise Conflict(f"session {session!r} is attached to another task")
    if await store.member(conn, task_pk=pk, agent=who) is None:
        raise Forbidden(f"agent {who!r} is not a member of task {task!r}")
    await sessions_store.attach_to_task(conn, session_pk=ref.pk, task_pk=pk, agent=who)
    return await read(conn, tenant=tenant, caller=caller, task=task)


async def shared_view(
    conn: AsyncConnection, *, tenant: str, caller: str | None, task: str
) -> SharedView:
    pk = await _visible(conn, tenant=tenant, task=task, agent=caller)
    row = await store.shared(conn, task_pk=pk)
    return SharedView(
        task_id=task,
        version=row.version,
        state=row.shared.state,
        attribution=attribution(row.shared),
        rendered=row.rendered,
        updated_at=row.updated_at,
    )


async def events(
    conn: AsyncConnection,
    *,
    tenant: str,
    caller: str | None,
    task: str,
    limit: int,
    before: int | None,
) -> list[dict[str, object]]:
    pk = await _visible(conn, tenant=tenant, task=task, agent=caller)
    return await store.events(conn, task_pk=pk, limit=limit, before=before)


@dataclass(frozen=True)
class ContributionSettings:
    decay_factor: float
    max_tokens: int
    tool_kinds: Mapping[str, ToolKind]


async def contribute_in(
    conn: AsyncConnection,
    *,
    session_pk: int,
    units: Sequence[Unit],
    private: TaskState,
    language: Language | None,
    settings: ContributionSettings,
    event_id: int | None,
) -> int | None:
    """In the compression's transaction: the session's shared units merged into its
    task's shared state, under the task row's lock (so sibling compressions each
    merge into the latest state, and none is lost). The new version, or None when
    the session contributes nothing (no task, a reader, nothing shared)."""
    task = await store.session_task(conn, session_pk=session_pk)
    if task is None or task.agent is None:
        return None
    # The role as of now, under the lock order session → task: a reader never writes.
    member = await store.member(conn, task_pk=task.task_pk, agent=task.agent)
    sections = writable(member)
    chosen = shared_units(units, sections, private, settings.tool_kinds)
    if not chosen:
        return None
    version, before = await store.lock_shared(conn, task_pk=task.task_pk)
    after = contribute(
        before,
        chosen,
        Contributor(agent=task.agent, session=task.session_id),
        decay_factor=settings.decay_factor,
        language=language,
    )
    lang = after.state.language or language
    tiers = render_tiers(
        after.state, language=lang, max_tokens=settings.max_tokens, tool_kinds=settings.tool_kinds
    )
    await store.write_shared(
        conn,
        task_pk=task.task_pk,
        version=version + 1,
        shared=after,
        renderings=[retitled(t, lang) for t in tiers],
    )
    await store.add_event(
        conn,
        task_pk=task.task_pk,
        session_pk=session_pk,
        agent=task.agent,
        version=version + 1,
        units=len(chosen),
        change_summary=diff_summary(before.state, after.state, lang),
        event_id=event_id,
    )
    return version + 1


async def private_sections(conn: AsyncConnection, *, session_pk: int) -> tuple[Section, ...]:
    """The shared sections this session writes (its private rendering leaves them out)."""
    task = await store.session_task(conn, session_pk=session_pk)
    return writable(task.member) if task is not None else ()

"""Tasks shared by sessions: create, roles, attach a session, the shared state, its audit."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import (
    INT8_MAX,
    AgentDep,
    AgentPath,
    EngineDep,
    ReadConnDep,
    TaskIdPath,
    TenantDep,
)
from app.api.problems import COMMON_PROBLEMS, documented
from app.api.schemas import (
    AttachIn,
    AttributedItem,
    CreditOut,
    RoleIn,
    SharedStateOut,
    TaskEventOut,
    TaskEventsOut,
    TaskIn,
    TaskMemberOut,
    TaskOut,
    TaskSessionOut,
)
from app.core.permissions import Membership
from app.services import tasks

router = APIRouter(
    prefix="/v1/tasks",
    tags=["tasks"],
    responses={**COMMON_PROBLEMS, **documented(403, 409)},
)


def _out(task: tasks.Task) -> TaskOut:
    return TaskOut(
        task_id=task.task_id,
        created_at=task.created_at,
        updated_at=task.updated_at,
        version=task.version,
        agents=[
            TaskMemberOut(
                agent=m.agent,
                role=m.role,
                sections=list(m.sections) if m.sections is not None else None,
            )
            for m in task.members
        ],
        sessions=[TaskSessionOut(session_id=s.session_id, agent=s.agent) for s in task.sessions],
    )


def _membership(agent: str, body: RoleIn) -> Membership:
    sections = tuple(dict.fromkeys(body.sections)) if body.sections is not None else None
    return Membership(agent=agent, role=body.role, sections=sections)


@router.post("", status_code=201, response_model=TaskOut)
async def create_task(
    body: TaskIn, engine: EngineDep, tenant: TenantDep, agent: AgentDep
) -> TaskOut:
    """Create a task (id chosen by the client) with its agents' roles. Needs a key not
    bound to an agent."""
    async with engine.begin() as conn:
        task = await tasks.create(
            conn,
            tenant=tenant,
            caller=agent,
            task=body.task_id,
            members=[_membership(a.agent, a) for a in body.agents],
        )
    return _out(task)


@router.get("/{task_id}", response_model=TaskOut)
async def get_task(
    task_id: TaskIdPath, conn: ReadConnDep, tenant: TenantDep, agent: AgentDep
) -> TaskOut:
    """The task, its agents and their roles, its sessions."""
    return _out(await tasks.read(conn, tenant=tenant, caller=agent, task=task_id))


@router.put("/{task_id}/agents/{agent_name}", response_model=TaskOut)
async def set_role(
    task_id: TaskIdPath,
    agent_name: AgentPath,
    body: RoleIn,
    engine: EngineDep,
    tenant: TenantDep,
    agent: AgentDep,
) -> TaskOut:
    """Set an agent's role on the task (reader or contributor, optionally per section)."""
    async with engine.begin() as conn:
        task = await tasks.set_role(
            conn, tenant=tenant, caller=agent, task=task_id, member=_membership(agent_name, body)
        )
    return _out(task)


@router.post("/{task_id}/sessions", response_model=TaskOut)
async def attach_session(
    task_id: TaskIdPath, body: AttachIn, engine: EngineDep, tenant: TenantDep, agent: AgentDep
) -> TaskOut:
    """Put a session on the task (one task per session). Its later compressions
    contribute to the shared state as its agent's role allows."""
    async with engine.begin() as conn:
        task = await tasks.attach(
            conn,
            tenant=tenant,
            caller=agent,
            task=task_id,
            session=body.session_id,
            agent=body.agent,
        )
    return _out(task)


@router.get("/{task_id}/state", response_model=SharedStateOut)
async def shared_state(
    task_id: TaskIdPath, conn: ReadConnDep, tenant: TenantDep, agent: AgentDep
) -> SharedStateOut:
    """The shared state, each item with the agents and sessions it came from."""
    view = await tasks.shared_view(conn, tenant=tenant, caller=agent, task=task_id)
    return SharedStateOut(
        task_id=view.task_id,
        version=view.version,
        state=view.state.model_dump(mode="json", exclude={"renderings"}),
        attribution=[
            AttributedItem(
                section=a.section,
                key=a.key,
                text=a.text,
                contributors=[
                    CreditOut(agent=c.agent, session_id=c.session, seq=c.seq)
                    for c in a.contributors
                ],
            )
            for a in view.attribution
        ],
        rendered=view.rendered,
        updated_at=view.updated_at,
    )


@router.get("/{task_id}/events", response_model=TaskEventsOut)
async def task_events(
    task_id: TaskIdPath,
    conn: ReadConnDep,
    tenant: TenantDep,
    agent: AgentDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[int | None, Query(ge=1, le=INT8_MAX)] = None,
) -> TaskEventsOut:
    """Contributions to the shared state, newest first (page with ``before``)."""
    rows = await tasks.events(
        conn, tenant=tenant, caller=agent, task=task_id, limit=limit, before=before
    )
    return TaskEventsOut(events=[TaskEventOut.model_validate(r) for r in rows])

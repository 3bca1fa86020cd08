"""Dependencies shared by the routes, as Annotated aliases so signatures read as sentences."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.api.schemas import ID_PATTERN
from app.core.config import Settings
from app.core.errors import Forbidden, NotFound
from app.core.metrics import Metrics
from app.core.permissions import sees_session
from app.services.auth import Guard
from app.stores import tasks as tasks_store
from app.stores.api_keys import Principal
from app.stores.engine import autocommit


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


async def get_engine(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


bearer = HTTPBearer(auto_error=False, description="An API key from `mnemo keys create`.")


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    guard: Guard = request.app.state.guard
    principal = await guard.principal(credentials.credentials if credentials else None)
    request.state.tenant = principal.tenant_id
    return principal


async def get_tenant(principal: Annotated[Principal, Depends(get_principal)]) -> str:
    return principal.tenant_id


async def get_agent(principal: Annotated[Principal, Depends(get_principal)]) -> str | None:
    """The agent the caller's key is bound to (None: an unbound key)."""
    return principal.agent


async def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.scope != "admin":
        raise Forbidden("this operation needs a key with the admin scope")
    return principal


async def read_connection(
    engine: Annotated[AsyncEngine, Depends(get_engine)],
) -> AsyncIterator[AsyncConnection]:
    """A connection in autocommit, for reads and for a write that is one statement: no
    BEGIN before its first statement and no COMMIT or ROLLBACK after it, two of the
    round trips of a request. Each statement is its own snapshot (and transaction); a
    read that needs transaction-local settings opens a transaction of its own
    (``stores.memories.vector_search``)."""
    async with autocommit(engine) as conn:
        yield conn


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated[AsyncEngine, Depends(get_engine)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
TenantDep = Annotated[str, Depends(get_tenant)]
AgentDep = Annotated[str | None, Depends(get_agent)]
AdminDep = Annotated[Principal, Depends(require_admin)]
ReadConnDep = Annotated[AsyncConnection, Depends(read_connection)]
SessionIdPath = Annotated[
    str, Path(pattern=ID_PATTERN, description="Client-chosen session id, 1–128 of [A-Za-z0-9._:@-]")
]
TaskIdPath = Annotated[
    str, Path(pattern=ID_PATTERN, description="Client-chosen task id, 1–128 of [A-Za-z0-9._:@-]")
]
AgentPath = Annotated[
    str, Path(pattern=ID_PATTERN, description="An agent name, 1–128 of [A-Za-z0-9._:@-]")
]
UserIdPath = Annotated[
    str, Path(pattern=ID_PATTERN, description="Client-chosen user id, 1–128 of [A-Za-z0-9._:@-]")
]

# Integer parameters are bounded to the column they are compared with, so an id or a
# seq Postgres cannot represent is a 422 naming the parameter, never a driver error.
INT4_MAX = 2**31 - 1  # integer columns (turns.seq)
INT8_MAX = 2**63 - 1  # bigint identity columns (compression_events.id, memories.id)
SeqQuery = Annotated[int, Query(ge=0, le=INT4_MAX)]
EventIdPath = Annotated[int, Path(ge=1, le=INT8_MAX, description="A compression event id.")]
MemoryIdPath = Annotated[int, Path(ge=1, le=INT8_MAX, description="A memory id.")]


async def own_session(session_id: SessionIdPath, request: Request, caller: PrincipalDep) -> None:
    """A key bound to an agent reaches only that agent's sessions: another agent's
    session is 404, as if it did not exist (an unknown one is left to the route)."""
    agent = caller.agent
    if agent is None:
        return
    async with request.app.state.engine.connect() as conn:
        exists, owner = await tasks_store.session_agent(
            conn, tenant=caller.tenant_id, session=session_id
        )
    if exists and not sees_session(agent, owner):
        raise NotFound(f"session {session_id!r} not found")

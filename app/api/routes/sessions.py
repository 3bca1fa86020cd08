"""Sessions, turns and context: the v1 routes agents call on every step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Query, Request, Response

from app.api.deps import (
    AgentDep,
    EngineDep,
    MetricsDep,
    PrincipalDep,
    ReadConnDep,
    SeqQuery,
    SessionIdPath,
    SettingsDep,
    TenantDep,
    own_session,
)
from app.api.problems import COMMON_PROBLEMS, documented
from app.api.quickroute import QuickRoute
from app.api.schemas import (
    ContextBlock,
    ContextOut,
    MessageIn,
    QueryText,
    SessionOut,
    StateOut,
    TurnsIn,
    TurnsOut,
    TurnsPage,
)
from app.api.validate import Limits, check_messages
from app.core import jsonio
from app.core.config import Settings
from app.core.errors import NotFound
from app.core.metrics import Metrics
from app.core.tokens import count_message_tokens
from app.core.turns import PreparedTurn
from app.services import ingest
from app.services.context import Context, MemoryOptions, context_on
from app.stores import sessions as repo
from app.stores.context import ContextConnection

router = APIRouter(
    prefix="/v1/sessions",
    tags=["sessions"],
    responses={**COMMON_PROBLEMS, **documented(409, 413)},
    dependencies=[Depends(own_session)],
)

# Counting tokens of a big batch is CPU work; off the event loop past this size.
THREAD_COUNT_THRESHOLD = 32


def prepare(
    messages: Sequence[MessageIn], count: Callable[[dict[str, Any]], int]
) -> list[PreparedTurn]:
    """The posted messages as the turns ingest stores, each with its token count."""
    prepared = []
    for m in messages:
        calls = [c.model_dump(mode="json") for c in m.tool_calls] if m.tool_calls else None
        as_message = {
            "role": m.role,
            "content": m.content,
            "name": m.name,
            "tool_calls": calls,
            "tool_call_id": m.tool_call_id,
        }
        prepared.append(
            PreparedTurn(
                client_id=m.id,
                role=m.role,
                content=m.content,
                tool_calls=calls,
                tool_call_id=m.tool_call_id,
                name=m.name,
                tokens=count(as_message),
                emphasized=m.emphasized,
                metadata=m.metadata,
                created_at=m.created_at,
            )
        )
    return prepared


@router.post("/{session_id}/turns", status_code=201, response_model=TurnsOut)
async def post_turns(
    session_id: SessionIdPath,
    request: Request,
    body: TurnsIn,
    settings: SettingsDep,
    metrics: MetricsDep,
    engine: EngineDep,
    tenant: TenantDep,
    agent: AgentDep,
) -> TurnsOut:
    """Append messages (OpenAI format) to the session's archive. No LLM on this path."""
    check_messages(
        body.messages,
        Limits(settings.max_messages_per_request, settings.max_content_chars),
        posted=[body.posted_index(i) for i in range(len(body.messages))],
    )
    if len(body.messages) > THREAD_COUNT_THRESHOLD:
        turns = await anyio.to_thread.run_sync(prepare, body.messages, count_message_tokens)
    else:
        turns = prepare(body.messages, count_message_tokens)
    async with engine.begin() as conn:
        out = await ingest.ingest_turns(
            conn,
            tenant=tenant,
            session=session_id,
            user=body.user_id,
            turns=turns,
            policy=request.app.state.trigger_policy,
            job_max_attempts=settings.job_max_attempts,
            index_delay_s=settings.index_delay_s,
        )
        # Under ingest's lock on the session row: a new session becomes the agent's;
        # another agent's is refused and nothing is stored.
        if agent is not None:
            owner = await repo.claim_for_agent(conn, tenant=tenant, session=session_id, agent=agent)
            if owner != agent:
                raise NotFound(f"session {session_id!r} not found")
    metrics.turns_ingested.inc(sum(not t.duplicate for t in out.turns))
    return TurnsOut.model_validate(out, from_attributes=True)


@router.get("/{session_id}", response_model=SessionOut)
async def get_session(
    session_id: SessionIdPath, conn: ReadConnDep, tenant: TenantDep
) -> SessionOut:
    found = await repo.get_session(conn, tenant=tenant, session=session_id)
    return SessionOut.model_validate(found, from_attributes=True)


def context_json(out: Context) -> bytes:
    """``out`` as ``ContextOut``'s JSON, to the byte. The values of a context are str,
    int, None, and lists and dicts of them (a message as stored, a tool call as
    validated at ingest); for those orjson writes what pydantic writes (the same order,
    escapes and number forms: ``tests/unit/test_context_json.py``) in a fraction of the
    time. An int orjson refuses (past 64 bits) goes through the model."""
    return jsonio.dumps_as(
        {
            "session_id": out.session_id,
            "user_id": out.user_id,
            "state_version": out.state_version,
            "messages": out.messages,
            "text": out.text,
            "blocks": [{"kind": b.kind, "tokens": b.tokens} for b in out.blocks],
            "tokens": out.tokens,
            "max_tokens": out.max_tokens,
            "full_history_tokens": out.full_history_tokens,
            "memory_ids": out.memory_ids,
        },
        lambda: context_model(out),
    )


def context_model(out: Context) -> ContextOut:
    """``out`` as ``ContextOut``, built from the typed values ``build_context`` returns
    (not validated again)."""
    return ContextOut.model_construct(
        session_id=out.session_id,
        user_id=out.user_id,
        state_version=out.state_version,
        messages=out.messages,
        text=out.text,
        blocks=[ContextBlock.model_construct(kind=b.kind, tokens=b.tokens) for b in out.blocks],
        tokens=out.tokens,
        max_tokens=out.max_tokens,
        full_history_tokens=out.full_history_tokens,
        memory_ids=out.memory_ids,
    )


def context_response(out: Context) -> Response:
    """``out`` as the bytes FastAPI writes for the response model, without validating
    twice (``model_validate``, then the response model) what ``build_context`` built."""
    return Response(context_json(out), media_type="application/json")


async def get_context(
    session_id: SessionIdPath,
    request: Request,
    principal: PrincipalDep,
    max_tokens: Annotated[int | None, Query(ge=64, le=1_000_000)] = None,
    query: Annotated[QueryText | None, Query()] = None,
    memory_tokens: Annotated[
        int | None,
        Query(
            ge=0,
            le=1_000_000,
            description="At most this many tokens of long-term memory (0: none). Default:"
            " all that the task state and the working window leave when `query` is given,"
            " else the configured share.",
        ),
    ] = None,
    memory_k: Annotated[
        int | None,
        Query(
            ge=0,
            le=500,
            description="Search candidates per retrieval list (0: no search). Default:"
            " follows the memory budget.",
        ),
    ] = None,
) -> Response:
    """The prompt to send before the next LLM call, within ``max_tokens``. Reads only."""
    # The hottest route takes the app's settings, metrics and engine from its state, not
    # as dependencies: FastAPI solves each node of a route's dependency tree on every
    # request (about 10 us a node, 30 for a yield): a sixth of a read's CPU with them.
    settings: Settings = request.app.state.settings
    metrics: Metrics = request.app.state.metrics
    budget = max_tokens if max_tokens is not None else settings.context_max_tokens
    memory = MemoryOptions(
        embedder=request.app.state.embedder,
        budget_tokens=settings.memory_budget_tokens,
        top_k=settings.memory_top_k,
        memory_tokens=memory_tokens,
        memory_k=memory_k,
        window_turns=settings.working_window_turns,
    )
    async with ContextConnection(request.app.state.engine) as read:
        out = await context_on(
            read.db,
            read.sqlalchemy,
            tenant=principal.tenant_id,
            session=session_id,
            max_tokens=budget,
            query=query,
            memory=memory,
            notice=settings.change_notice,
        )
    metrics.context_tokens.observe(out.tokens)
    metrics.history_tokens.observe(out.full_history_tokens)
    if out.memory_ids:
        metrics.memory_hits.inc(len(out.memory_ids))
    return context_response(out)


router.add_api_route(
    "/{session_id}/context",
    get_context,
    methods=["GET"],
    response_model=ContextOut,
    route_class_override=QuickRoute,
)


@router.get("/{session_id}/state", response_model=StateOut)
async def get_state(session_id: SessionIdPath, conn: ReadConnDep, tenant: TenantDep) -> StateOut:
    found = await repo.get_state(conn, tenant=tenant, session=session_id)
    return StateOut.model_validate(found, from_attributes=True)


@router.get("/{session_id}/turns", response_model=TurnsPage)
async def list_turns(
    session_id: SessionIdPath,
    conn: ReadConnDep,
    tenant: TenantDep,
    after_seq: SeqQuery = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TurnsPage:
    page = await repo.list_turns(
        conn, tenant=tenant, session=session_id, after_seq=after_seq, limit=limit
    )
    return TurnsPage.model_validate(page, from_attributes=True)


@router.delete("/{session_id}", status_code=204)
async def delete_session(
    session_id: SessionIdPath, engine: EngineDep, tenant: TenantDep
) -> Response:
    async with engine.begin() as conn:
        await repo.delete_session(conn, tenant=tenant, session=session_id)
    return Response(status_code=204)

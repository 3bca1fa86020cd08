"""Long-term memory of a user, and erasing a user."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from app.api.deps import (
    AdminDep,
    EngineDep,
    MemoryIdPath,
    PrincipalDep,
    TenantDep,
    UserIdPath,
)
from app.api.problems import COMMON_PROBLEMS, documented
from app.api.quickroute import QuickRoute
from app.api.schemas import MemoriesOut, MemoryIn, MemoryKind, MemoryPublic, QueryText
from app.compression.untrusted import one_line
from app.core import jsonio
from app.core.config import Settings
from app.core.errors import NotFound
from app.services.memories import add_memory, search_memories
from app.stores import memories as repo
from app.stores import sessions
from app.stores.engine import autocommit, driver_checkout
from app.stores.memories import MemoryRow

router = APIRouter(
    prefix="/v1/users",
    tags=["memories"],
    responses={**COMMON_PROBLEMS},
)


def public(row: MemoryRow, *, deduplicated: bool = False) -> MemoryPublic:
    """The memory as the API shows it, built without validation: every value comes typed
    from the store (validating ten hits cost more than writing them)."""
    return MemoryPublic.model_construct(
        id=row.id,
        text=row.text,
        kind=row.kind,
        score=row.score,
        pinned=row.pinned,
        expires_at=row.expires_at,
        created_at=row.created_at,
        last_confirmed_at=row.last_confirmed_at,
        times_confirmed=row.times_confirmed,
        source=row.source,
        metadata=row.metadata,
        deduplicated=deduplicated,
    )


# MemoryPublic's fields, in its order: the keys of the objects ``_dumped`` writes.
_PUBLIC_FIELDS = tuple(MemoryPublic.model_fields)


def _public_dict(row: MemoryRow, deduplicated: bool) -> dict[str, Any]:
    return dict(
        zip(
            _PUBLIC_FIELDS,
            (
                row.id,
                row.text,
                row.kind,
                row.score,
                row.pinned,
                row.expires_at,
                row.created_at,
                row.last_confirmed_at,
                row.times_confirmed,
                row.source,
                row.metadata,
                deduplicated,
            ),
            strict=True,
        )
    )


def memory_body(row: MemoryRow, *, deduplicated: bool = False) -> bytes:
    """``MemoryPublic``'s JSON for ``row``."""
    return jsonio.dumps_as(
        _public_dict(row, deduplicated), lambda: public(row, deduplicated=deduplicated)
    )


def memories_body(rows: list[MemoryRow]) -> bytes:
    """``MemoriesOut``'s JSON for ``rows``."""
    return jsonio.dumps_as(
        {"memories": [_public_dict(r, False) for r in rows]},
        lambda: MemoriesOut.model_construct(memories=[public(r) for r in rows]),
    )


def json_body(body: bytes, *, status_code: int = 200) -> Response:
    return Response(body, status_code=status_code, media_type="application/json")


# The two hot routes (add, search) take the app's settings and engine from its state,
# and open their connection themselves, as GET /context does: FastAPI solves every node
# of a route's dependency tree on every request (about 10 us a node, 30 for a yield).


@router.post("/{user_id}/memories", status_code=201, response_model=MemoryPublic)
async def create_memory(
    user_id: UserIdPath, body: MemoryIn, request: Request, principal: PrincipalDep
) -> Response:
    """Store a memory. Saying the same thing again confirms it (``deduplicated``)."""
    settings: Settings = request.app.state.settings
    # One statement for a known user: autocommit, no BEGIN/COMMIT round trips.
    async with autocommit(request.app.state.engine) as conn:
        added = await add_memory(
            conn,
            tenant=principal.tenant_id,
            user=user_id,
            text=one_line(body.text),
            kind=body.kind,
            pinned=body.pinned,
            ttl_days=body.ttl_days or settings.memory_ttl_days,
            metadata=body.metadata,
            source={"api": True},
            max_attempts=settings.job_max_attempts,
        )
    return json_body(memory_body(added.memory, deduplicated=not added.created), status_code=201)


async def list_memories(
    user_id: UserIdPath,
    request: Request,
    principal: PrincipalDep,
    query: Annotated[QueryText | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
    kind: MemoryKind | None = None,
) -> Response:
    """The user's live memories; with ``query``, the best matches (vector + lexical)."""
    tenant = principal.tenant_id
    found: list[MemoryRow] | None
    if query and query.strip():
        # The search's statements all go through the driver: no SQLAlchemy connection.
        async with driver_checkout(request.app.state.engine) as db:
            found = await search_memories(
                db,
                tenant=tenant,
                user=user_id,
                query=query,
                k=limit,
                kind=kind,
                embedder=request.app.state.embedder,
            )
    else:
        async with autocommit(request.app.state.engine) as conn:
            user_pk = await sessions.user_pk(conn, tenant=tenant, user=user_id)
            found = None
            if user_pk is not None:
                found = await repo.list_memories(conn, user_pk=user_pk, kind=kind, limit=limit)
    if found is None:
        raise NotFound(f"user {user_id!r} not found")
    return json_body(memories_body(found))


# As ``@router.get`` would register it, with the route class (the decorator takes none).
router.add_api_route(
    "/{user_id}/memories",
    list_memories,
    methods=["GET"],
    response_model=MemoriesOut,
    responses=documented(502),  # the embedding service's error (a 503 is in COMMON_PROBLEMS)
    route_class_override=QuickRoute,
)


@router.delete("/{user_id}/memories/{memory_id}", status_code=204)
async def delete_memory(
    user_id: UserIdPath, memory_id: MemoryIdPath, engine: EngineDep, tenant: TenantDep
) -> Response:
    async with engine.begin() as conn:
        user_pk = await sessions.user_pk(conn, tenant=tenant, user=user_id)
        if user_pk is None or not await repo.delete_memory(
            conn, user_pk=user_pk, memory_id=memory_id
        ):
            raise NotFound(f"memory {memory_id} not found")
    return Response(status_code=204)


@router.delete("/{user_id}", status_code=204)
async def erase_user(
    user_id: UserIdPath, engine: EngineDep, tenant: TenantDep, _: AdminDep
) -> Response:
    """Erase the user: sessions, turns, states, events, memories and their jobs."""
    async with engine.begin() as conn:
        if not await sessions.delete_user(conn, tenant=tenant, user=user_id):
            raise NotFound(f"user {user_id!r} not found")
    return Response(status_code=204)

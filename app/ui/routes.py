"""The inspector's pages and forms (/ui). Server-rendered; every route needs an admin
key of the tenant whose data it shows (see app/ui/auth.py)."""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from sqlalchemy.exc import IntegrityError

from app.api.deps import (
    EngineDep,
    EventIdPath,
    MemoryIdPath,
    ReadConnDep,
    SessionIdPath,
    SettingsDep,
    UserIdPath,
)
from app.core.errors import Conflict, MnemoError, NotFound
from app.services import compact, inspector
from app.services.context import MemoryOptions, build_context
from app.stores import memories, queue, sessions
from app.ui.auth import COOKIE, PATH, ActorDep, LoginRequired, ViewerDep, principal_of
from app.ui.format import FILTERS, GLOBALS

log = logging.getLogger(__name__)

HERE = pathlib.Path(__file__).parent
STATIC = HERE / "static"
STATIC_FILES = {p.name: p for p in STATIC.iterdir() if p.is_file()}
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters.update(FILTERS)
templates.env.globals.update(GLOBALS)
MEMORY_KINDS = ("preference", "profile", "rule", "high_stakes", "episode", "fact")
SORTS = tuple(sessions.SESSION_ORDER)
JobIdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]


class PageRoute(APIRoute):
    """Errors of a page are pages: the login form, or a short explanation."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired:
                return login_page(request, status=401)
            except MnemoError as exc:
                return render(
                    request, "error.html", {"title": exc.title, "detail": exc.detail}, exc.status
                )

        return page


router = APIRouter(prefix=PATH, include_in_schema=False, route_class=PageRoute)


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    response = templates.TemplateResponse(request, name, context, status_code=status)
    response.headers["cache-control"] = "no-store"
    response.headers["x-frame-options"] = "DENY"
    response.headers["content-security-policy"] = (
        "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"
    )
    return response


def back(path: str, note: str | None = None) -> RedirectResponse:
    """After a form: 303 to the page (a reload does not repeat the action)."""
    return RedirectResponse(f"{path}?note={quote(note)}" if note else path, status_code=303)


async def form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(body, max_num_fields=20).items()}


def login_page(request: Request, *, status: int, error: str | None = None) -> Response:
    return render(request, "login.html", {"error": error}, status)


# --- login ---------------------------------------------------------------------------


@router.get("/login")
async def login_form(request: Request) -> Response:
    return login_page(request, status=200)


@router.post("/login")
async def login(request: Request) -> Response:
    key = (await form(request)).get("key", "").strip()
    try:
        await principal_of(request, key or None)
    except MnemoError as exc:
        return login_page(request, status=exc.status, error=exc.detail)
    response = back(f"{PATH}/sessions")
    response.set_cookie(
        COOKIE,
        key,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )  # no max-age: gone when the browser session ends
    return response


@router.post("/logout")
async def logout() -> Response:
    response = back(f"{PATH}/login")
    response.delete_cookie(COOKIE, path=PATH)
    return response


@router.get("/static/{name}")
async def static(name: str, _: ViewerDep) -> Response:
    path = STATIC_FILES.get(name)
    if path is None:
        raise NotFound("no such file")
    return FileResponse(path, headers={"cache-control": "private, max-age=300"})


# --- sessions ------------------------------------------------------------------------


@router.get("")
async def home(_: ViewerDep) -> Response:
    return back(f"{PATH}/sessions")


@router.get("/sessions")
async def sessions_page(
    request: Request,
    viewer: ViewerDep,
    conn: ReadConnDep,
    q: Annotated[str, Query(max_length=128)] = "",
    sort: str = "activity",
) -> Response:
    rows = await sessions.sessions_overview(
        conn, tenant=viewer.tenant_id, search=q, sort=sort, limit=200
    )
    context = {"rows": rows, "q": q, "sort": sort, "sorts": SORTS, "tenant": viewer.tenant_id}
    return render(request, "sessions.html", context)


@router.get("/sessions/{session_id}")
async def session_page(
    request: Request,
    session_id: SessionIdPath,
    viewer: ViewerDep,
    conn: ReadConnDep,
    settings: SettingsDep,
    after_seq: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    budget: Annotated[int | None, Query(ge=64, le=1_000_000)] = None,
    note: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    view = await inspector.session_view(
        conn, tenant=viewer.tenant_id, session=session_id, after_seq=after_seq
    )
    max_tokens = budget or settings.context_max_tokens
    ctx = await build_context(
        conn,
        tenant=viewer.tenant_id,
        session=session_id,
        max_tokens=max_tokens,
        memory=MemoryOptions(
            embedder=request.app.state.embedder,
            budget_tokens=settings.memory_budget_tokens,
            top_k=settings.memory_top_k,
            window_turns=settings.working_window_turns,
        ),
    )
    context = {"view": view, "ctx": ctx, "budget": max_tokens, "note": note}
    return render(request, "session.html", context)


@router.get("/sessions/{session_id}/events/{event_id}")
async def event_page(
    request: Request,
    session_id: SessionIdPath,
    event_id: EventIdPath,
    viewer: ViewerDep,
    conn: ReadConnDep,
) -> Response:
    row, diff, full = await inspector.event_view(
        conn, tenant=viewer.tenant_id, session=session_id, event_id=event_id
    )
    return render(request, "event.html", {"row": row, "d": diff, "full": full})


@router.post("/sessions/{session_id}/compact")
async def compress_now(
    session_id: SessionIdPath, actor: ActorDep, engine: EngineDep, settings: SettingsDep
) -> Response:
    scheduled = await compact.schedule(
        engine, tenant=actor.tenant_id, session=session_id, max_attempts=settings.job_max_attempts
    )
    return back(f"{PATH}/sessions/{session_id}", f"compression scheduled (job {scheduled.job_id})")


# --- users and their memories --------------------------------------------------------


@router.get("/users")
async def find_user(_: ViewerDep, user: Annotated[str, Query(max_length=128)] = "") -> Response:
    return back(f"{PATH}/users/{quote(user.strip(), safe='')}" if user.strip() else f"{PATH}")


@router.get("/users/{user_id}")
async def user_page(
    request: Request,
    user_id: UserIdPath,
    viewer: ViewerDep,
    conn: ReadConnDep,
    q: Annotated[str, Query(max_length=2000)] = "",
    kind: str = "",
    note: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    view = await inspector.user_view(
        conn,
        tenant=viewer.tenant_id,
        user=user_id,
        query=q,
        kind=kind if kind in MEMORY_KINDS else None,
        embedder=request.app.state.embedder,
    )
    if view is None:
        raise NotFound(f"user {user_id!r} not found")
    context = {"view": view, "kinds": MEMORY_KINDS, "note": note}
    return render(request, "user.html", context)


async def _user_pk(conn: Any, tenant: str, user: str) -> int:
    pk = await sessions.user_pk(conn, tenant=tenant, user=user)
    if pk is None:
        raise NotFound(f"user {user!r} not found")
    return pk


@router.post("/users/{user_id}/memories/{memory_id}/{action}")
async def memory_action(
    user_id: UserIdPath, memory_id: MemoryIdPath, action: str, actor: ActorDep, engine: EngineDep
) -> Response:
    if action not in ("pin", "unpin", "delete"):
        raise NotFound("no such action")
    async with engine.begin() as conn:
        user_pk = await _user_pk(conn, actor.tenant_id, user_id)
        if action == "delete":
            done = await memories.delete_memory(conn, user_pk=user_pk, memory_id=memory_id)
        else:
            done = await memories.set_pinned(
                conn, user_pk=user_pk, memory_id=memory_id, pinned=action == "pin"
            )
    if not done:
        raise NotFound(f"memory {memory_id} not found")
    return back(f"{PATH}/users/{user_id}", f"memory {memory_id}: {action} done")


@router.get("/users/{user_id}/erase")
async def erase_form(
    request: Request, user_id: UserIdPath, viewer: ViewerDep, conn: ReadConnDep
) -> Response:
    await _user_pk(conn, viewer.tenant_id, user_id)
    return render(request, "erase.html", {"user": user_id, "error": None})


@router.post("/users/{user_id}/erase")
async def erase(
    request: Request, user_id: UserIdPath, actor: ActorDep, engine: EngineDep
) -> Response:
    if (await form(request)).get("confirm", "") != user_id:
        return render(
            request,
            "erase.html",
            {"user": user_id, "error": "Type the user id exactly to confirm."},
            422,
        )
    async with engine.begin() as conn:
        if not await sessions.delete_user(conn, tenant=actor.tenant_id, user=user_id):
            raise NotFound(f"user {user_id!r} not found")
    log.info("user erased from the inspector", extra={"tenant": actor.tenant_id})
    return back(f"{PATH}/sessions")


# --- the queue -----------------------------------------------------------------------


@router.get("/queue")
async def queue_page(
    request: Request,
    viewer: ViewerDep,
    conn: ReadConnDep,
    note: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    view = await inspector.queue_view(conn, tenant=viewer.tenant_id)
    return render(request, "queue.html", {"view": view, "note": note})


@router.post("/queue/jobs/{job_id}/requeue")
async def requeue(job_id: JobIdPath, actor: ActorDep, engine: EngineDep) -> Response:
    try:
        async with engine.begin() as conn:
            done = await queue.requeue(conn, job_id=job_id, tenant=actor.tenant_id)
    except IntegrityError:
        done = False  # an equal job was queued meanwhile
    if not done:
        raise Conflict(f"job {job_id} is not dead, or an equal job already waits")
    return back(f"{PATH}/queue", f"job {job_id} requeued")

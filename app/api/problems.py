"""Every error leaves as RFC 9457 problem+json; this is the one place that maps them."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.core.errors import MnemoError
from app.core.logs import request_id
from app.providers.embed import EmbeddingError, EmbeddingUnavailable

log = logging.getLogger(__name__)

PROBLEM_TYPE_BASE = "https://mnemo.dev/problems/"
RETRY_AFTER_S = 2
_PATH_PARAMETER = re.compile(r"\{[^}/]+\}")  # "{session_id}" in an OpenAPI path


def problem(
    status: int,
    title: str,
    detail: str,
    slug: str,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + slug,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    return JSONResponse(
        body, status_code=status, media_type="application/problem+json", headers=headers
    )


def error_id() -> str:
    """The id a client quotes and an operator greps: the request id when there is one."""
    return request_id.get() or uuid.uuid4().hex


def server_error(
    what: str,
    exc: BaseException | None = None,
    *,
    detail: str | None = None,
    title: str = "Internal error",
    slug: str = "internal",
) -> JSONResponse:
    """A generic 500: the cause goes to the log under an error id, only the id to the client.

    Exception texts can quote input (pydantic's ``input_value``, a driver message), so
    they never leave the process in a response body.
    """
    eid = error_id()
    log.error("%s (error id %s)", what, eid, exc_info=exc, extra={"error_id": eid})
    return problem(500, title, f"{detail or what}; error id {eid}", slug)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    out = []
    for e in exc.errors():
        loc = [p for p in e.get("loc", ()) if p != "function-after"]
        out.append(
            {
                "loc": loc,
                "field": ".".join(str(p) for p in loc),
                "msg": e.get("msg", "invalid"),
                "type": e.get("type", "value_error"),
            }
        )
    return out


# Errors that mean "the database is not there right now", not "the query is wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    OperationalError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,  # shutting down, cannot connect now
    asyncpg.InterfaceError,  # the connection is closed
)


# Errors that mean "a connection that worked is gone" (its backend terminated, the
# server restarted under it): a fresh connection may well work at once. A connection
# refused or not allowed yet (57P03, a refused socket) is not among them.
LOST_IN_USE: tuple[type[BaseException], ...] = (
    asyncpg.ConnectionDoesNotExistError,  # closed in the middle of a statement
    asyncpg.InterfaceError,  # the connection is closed
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.IdleSessionTimeoutError,
    ConnectionResetError,
    BrokenPipeError,
)

# Set by a request that may run again (a read: ``ReplayLostReads``); the problem handler
# marks it when the request failed for a connection lost in use.
connection_lost: ContextVar[list[BaseException] | None] = ContextVar(
    "connection_lost", default=None
)


def _causes(exc: BaseException | None) -> Iterator[BaseException]:
    seen = 0
    while exc is not None and seen < 8:  # the driver error may be a cause of a wrapper
        yield exc
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "orig", None)
        seen += 1


def _is_db_unavailable(exc: BaseException | None) -> bool:
    return any(
        isinstance(e, CONNECTION_ERRORS) or (isinstance(e, DBAPIError) and e.connection_invalidated)
        for e in _causes(exc)
    )


def _is_lost_in_use(exc: BaseException) -> bool:
    return any(
        isinstance(e, LOST_IN_USE) or (isinstance(e, DBAPIError) and e.connection_invalidated)
        for e in _causes(exc)
    )


def install(app: FastAPI) -> None:
    @app.exception_handler(MnemoError)
    async def _mnemo(_: Request, exc: MnemoError) -> JSONResponse:
        if exc.status >= 500 and exc.status != 503:
            return server_error(
                exc.title.lower(), exc, detail=exc.public_detail, title=exc.title, slug=exc.slug
            )
        headers = None
        if exc.status == 503:
            headers = {"Retry-After": str(RETRY_AFTER_S)}
        elif exc.status == 401:
            headers = {"WWW-Authenticate": 'Bearer realm="mnemo"'}
        return problem(
            exc.status,
            exc.title,
            exc.detail,
            exc.slug,
            [e.as_dict() for e in exc.errors],
            headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _validation_errors(exc)
        fields = ", ".join(e["field"] for e in errors[:5])
        return problem(422, "Invalid input", f"invalid field(s): {fields}", "validation", errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, RecursionError):  # FastAPI's body parse, too deep
            return _too_deep_problem()
        # Keep the exception's headers: a 405 must say what is Allowed (RFC 9110).
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = _allowed_methods(app, request)
        return problem(
            exc.status_code,
            str(exc.detail),
            str(exc.detail),
            f"http-{exc.status_code}",
            headers=headers,
        )

    @app.exception_handler(DBAPIError)
    async def _db(_: Request, exc: DBAPIError) -> JSONResponse:
        return _database_problem(exc)

    @app.exception_handler(OSError)
    async def _os(_: Request, exc: OSError) -> JSONResponse:
        return _database_problem(exc)

    @app.exception_handler(asyncpg.PostgresError)
    async def _pg(_: Request, exc: asyncpg.PostgresError) -> JSONResponse:
        return _database_problem(exc)

    @app.exception_handler(asyncpg.InterfaceError)
    async def _pg_interface(_: Request, exc: asyncpg.InterfaceError) -> JSONResponse:
        return _database_problem(exc)

    @app.exception_handler(EmbeddingError)
    async def _embedding(_: Request, exc: EmbeddingError) -> JSONResponse:
        return _embedding_problem(exc)

    @app.exception_handler(RecursionError)
    async def _too_deep(_: Request, exc: RecursionError) -> JSONResponse:
        return _too_deep_problem()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return server_error("unexpected error", exc)


def _too_deep_problem() -> JSONResponse:
    # Nesting beyond what the parsers handle is bad input, not a server fault.
    error = {"loc": ["body"], "field": "body", "msg": "nested too deeply", "type": "too_deep"}
    return problem(422, "Invalid input", "JSON nested too deeply", "validation", [error])


def _embedding_problem(exc: EmbeddingError) -> JSONResponse:
    # A search's query embedding failed at the embedding service (``MNEMO_EMBEDDER=openai``):
    # neither this service's fault nor the request's. Unreachable, timed out, overloaded
    # (429, 5xx): retry shortly. Any other answer (a 4xx, a malformed body) is the
    # service's configuration or the provider's: a 502 that names it.
    log.warning("embedding service failed: %s", exc)
    if isinstance(exc, EmbeddingUnavailable):
        return problem(
            503,
            "Embedding service unavailable",
            "the embedding service did not answer this query; retry shortly",
            "embedding-unavailable",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    return problem(
        502,
        "Embedding service error",
        "the embedding service refused or garbled this query's embedding",
        "embedding-error",
    )


def _allowed_methods(app: FastAPI, request: Request) -> str:
    """The documented methods of the request's path (Starlette's 405 names one route's)."""
    path = request.url.path
    methods = {
        method.upper()
        for template, operations in app.openapi()["paths"].items()
        if re.fullmatch(_PATH_PARAMETER.sub("[^/]+", template), path)
        for method in operations
    }
    return ", ".join(sorted(methods))


def _database_problem(exc: BaseException) -> JSONResponse:
    lost = connection_lost.get()
    if lost is not None and _is_lost_in_use(exc):
        lost.append(exc)
    if _is_db_unavailable(exc):
        log.warning("database unavailable: %s", exc)
        return problem(
            503,
            "Service unavailable",
            "the database is unavailable; retry shortly",
            "unavailable",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    return server_error("unexpected database error", exc)


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for problem responses, so clients and fuzzers know their shape."""
    from app.api.schemas import Problem

    descriptions = {
        401: "Missing or invalid API key",
        403: "The key's scope does not allow this",
        404: "Unknown id (or another tenant's)",
        409: "Conflict (session bound to another user)",
        413: "Over a documented size limit",
        422: "Invalid input: `errors` names each field at fault",
        500: "Unexpected failure",
        502: "The embedding service refused or garbled the query's embedding",
        503: "Database (or embedding service) unavailable; retry after `Retry-After` seconds",
    }
    return {
        status: {
            "model": Problem,
            "description": descriptions[status],
            "content": {"application/problem+json": {}},
        }
        for status in statuses
    }


COMMON_PROBLEMS = documented(401, 403, 404, 422, 500, 503)

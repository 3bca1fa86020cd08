"""What the OpenAPI document adds for client generators and fuzzers, and the docs pages.

- ``operationId`` is the route function's name (``post_turns``, ``get_context``): stable
  as long as the function keeps its name, and what a generated client calls its method.
- Request and response examples, so generated docs and clients show real payloads.
- Every status the server can answer is documented: 400 (a body that cannot be parsed,
  e.g. not UTF-8) and 413 (the body limit, enforced by middleware) on every operation
  with a body, 503 on ``/readyz``.
- Links from the create operations to the reads of what they created, so stateful
  fuzzers (schemathesis) and readers see how the calls chain.
- ``/docs`` (Swagger UI) and ``/redoc`` load their scripts from the ``fastapi-offline``
  package's static files, served here: no CDN, so they work air-gapped.

``docs/openapi.json`` is this document, committed; a test keeps it equal to the served
one. Regenerate it with ``python -m app.main > docs/openapi.json``.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"
PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


def operation_id(route: APIRoute) -> str:
    return route.name


# Links: operation id -> (status, {link name: (target operation id, parameters)}).
LINKS: dict[str, tuple[str, dict[str, tuple[str, dict[str, str]]]]] = {
    "post_turns": (
        "201",
        {
            "GetSession": ("get_session", {"session_id": "$request.path.session_id"}),
            "GetContext": ("get_context", {"session_id": "$request.path.session_id"}),
            "GetState": ("get_state", {"session_id": "$request.path.session_id"}),
            "ListTurns": ("list_turns", {"session_id": "$request.path.session_id"}),
            "Compact": ("compact", {"session_id": "$request.path.session_id"}),
            "ListEvents": ("list_events", {"session_id": "$request.path.session_id"}),
            "ListMemories": ("list_memories", {"user_id": "$response.body#/user_id"}),
            "DeleteSession": ("delete_session", {"session_id": "$request.path.session_id"}),
            "PopTurn": ("pop_turn", {"session_id": "$request.path.session_id"}),
        },
    ),
    "create_memory": (
        "201",
        {
            "ListMemories": ("list_memories", {"user_id": "$request.path.user_id"}),
            "DeleteMemory": (
                "delete_memory",
                {"user_id": "$request.path.user_id", "memory_id": "$response.body#/id"},
            ),
            "EraseUser": ("erase_user", {"user_id": "$request.path.user_id"}),
        },
    ),
    "compact": (
        "200",
        {
            "GetEvent": (
                "get_event",
                {"session_id": "$request.path.session_id", "event_id": "$response.body#/id"},
            ),
        },
    ),
}

TURNS_EXAMPLE = {
    "user_id": "u-42",
    "messages": [
        {"role": "user", "content": "Never book red-eye flights.", "id": "m-1", "emphasized": True},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "book_flight", "arguments": '{"flight": "TP204"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"pnr": "QX7T2L"}'},
    ],
}

REQUEST_EXAMPLES: dict[str, dict[str, Any]] = {
    "post_turns": TURNS_EXAMPLE,
    "create_memory": {"text": "Allergic to peanuts.", "kind": "high_stakes", "pinned": True},
    "create_task": {
        "task_id": "trip-7",
        "agents": [
            {"agent": "planner", "role": "contributor"},
            {"agent": "booker", "role": "contributor", "sections": ["actions", "artifacts"]},
            {"agent": "reviewer", "role": "reader"},
        ],
    },
    "set_role": {"role": "contributor", "sections": ["decisions"]},
    "attach_session": {"session_id": "s-booker-1"},
    "signal_miss": {"needed": "the customer's loyalty number"},
}

RESPONSE_EXAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "pop_turn": (
        "200",
        {
            "session_id": "s-1",
            "turn": {
                "id": "m-7",
                "seq": 7,
                "role": "user",
                "content": "Actually, make it Lisbon.",
                "name": None,
                "tool_calls": None,
                "tool_call_id": None,
                "tokens": 9,
                "emphasized": False,
                "metadata": {},
                "created_at": "2026-01-05T10:00:00Z",
                "compacted": False,
            },
            "turn_count": 6,
            "history_tokens": 412,
        },
    ),
    "post_turns": (
        "201",
        {
            "session_id": "s-1",
            "user_id": "u-42",
            "turns": [
                {"id": "m-1", "seq": 1, "tokens": 12, "duplicate": False},
                {"id": "t_5f0c2a9e", "seq": 2, "tokens": 24, "duplicate": False},
                {"id": "t_91d3b7c4", "seq": 3, "tokens": 18, "duplicate": False},
            ],
            "history_tokens": 54,
            "compression_scheduled": False,
            "trigger": None,
        },
    ),
    "get_context": (
        "200",
        {
            "session_id": "s-1",
            "user_id": "u-42",
            "state_version": 1,
            "messages": [
                {"role": "system", "content": "Task state:\nConstraints: no red-eye flights"},
                {"role": "user", "content": "And a hotel near the airport?"},
            ],
            "text": "Task state:\nConstraints: no red-eye flights\n\nuser: And a hotel…",
            "blocks": [{"kind": "task_state", "tokens": 12}, {"kind": "recent", "tokens": 10}],
            "tokens": 22,
            "max_tokens": 2500,
            "full_history_tokens": 4210,
            "memory_ids": [],
        },
    ),
    "create_memory": (
        "201",
        {
            "id": 7,
            "text": "Allergic to peanuts.",
            "kind": "high_stakes",
            "score": None,
            "pinned": True,
            "expires_at": None,
            "created_at": "2026-01-05T10:00:00Z",
            "last_confirmed_at": "2026-01-05T10:00:00Z",
            "times_confirmed": 1,
            "source": {"api": True},
            "metadata": {},
            "deduplicated": False,
        },
    ),
}

INVALID_EXAMPLE = {
    "type": "https://mnemo.dev/problems/validation",
    "title": "Invalid input",
    "status": 422,
    "detail": "invalid field(s): body.messages.0.tool_call_id",
    "errors": [
        {
            "loc": ["body", "messages", 0, "tool_call_id"],
            "field": "body.messages.0.tool_call_id",
            "msg": "required for role 'tool'",
            "type": "missing",
        }
    ],
}


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": PROBLEM_REF}},
    }


def refine(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the examples, statuses and links above to FastAPI's document (in place)."""
    operations = {
        op["operationId"]: op
        for path in schema["paths"].values()
        for op in path.values()
        if "operationId" in op
    }
    for op in operations.values():
        if "requestBody" in op:
            op["responses"].setdefault("400", _problem("The body cannot be parsed (not UTF-8)"))
            op["responses"].setdefault("413", _problem("Over a documented size limit"))
        invalid = op["responses"].get("422", {}).get("content", {})
        for media in invalid.values():
            media["schema"] = PROBLEM_REF
            media["example"] = INVALID_EXAMPLE
    for op_id, example in REQUEST_EXAMPLES.items():
        operations[op_id]["requestBody"]["content"]["application/json"]["example"] = example
    for op_id, (status, example) in RESPONSE_EXAMPLES.items():
        operations[op_id]["responses"][status]["content"]["application/json"]["example"] = example
    for op_id, (status, links) in LINKS.items():
        operations[op_id]["responses"][status]["links"] = {
            name: {"operationId": target, "parameters": params}
            for name, (target, params) in links.items()
        }
    operations["readyz"]["responses"]["503"] = _problem("Not ready: database or schema")
    return schema


def install(app: FastAPI) -> None:
    """Serve the refined document and the offline docs pages."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = refine(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    static = files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(static)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/favicon.png",
            with_google_fonts=False,
        )

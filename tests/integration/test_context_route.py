"""GET /v1/sessions/{id}/context as the route writes it, against real Postgres: the body
is ``ContextOut``'s JSON to the byte, and a read resolves no dependency but the caller's
key and the session's owner (FastAPI solves every node of a route's dependency tree on
every request: the tree was a fifth of a one-client read's CPU)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi.dependencies.models import Dependant
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.deps import bearer, get_principal, get_settings, own_session
from app.api.routes import sessions
from app.api.schemas import ContextOut
from tests.conftest import post_turns
from tests.integration.test_auth import app_of
from tests.integration.test_context import call
from tests.integration.test_tasks import make_keys


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any] | None]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def solving_recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The requests FastAPI's handler solves from now on, as ``path?query``."""
    solved: list[str] = []
    solve = fastapi.routing.solve_dependencies

    async def counted(*args: Any, **kwargs: Any) -> Any:
        scope = kwargs["request"].scope
        solved.append(f"{scope['raw_path'].decode()}?{scope['query_string'].decode()}")
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    return solved


def test_a_context_read_resolves_only_the_callers_key_and_the_sessions_owner() -> None:
    (route,) = [r for r in sessions.router.routes if getattr(r, "name", "") == "get_context"]
    assert set(_calls(route.dependant)) == {own_session, get_principal, bearer}


async def test_the_body_is_the_response_models_json_to_the_byte(
    client: httpx.AsyncClient,
) -> None:
    arguments = '{"city": "Zürich", "nights": 2, "budget": 1234.5, "flags": [true, null]}'
    r = await post_turns(
        client,
        "s-body",
        [
            {"role": "system", "content": "You book trips."},
            {"role": "user", "content": '请帮我订酒店 \u2028 with a "quoted" word\nand a tab\t.'},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "book", arguments)]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true, "id": 12345678901}'},
            {"role": "assistant", "content": "Booked: €120 a night.", "name": "planner"},
        ],
    )
    assert r.status_code == 201, r.text
    memory = await client.post(
        "/v1/users/u-1/memories",
        json={"text": "Allergic to peanuts.", "kind": "high_stakes", "pinned": True},
    )
    assert memory.status_code == 201, memory.text

    read = []
    for url in ("/v1/sessions/s-body/context", "/v1/sessions/s-body/context?max_tokens=90"):
        got = await client.get(url)
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "application/json"
        assert int(got.headers["content-length"]) == len(got.content)
        model = ContextOut.model_validate_json(got.content)
        assert got.content == model.model_dump_json().encode()
        read.append(model)
    assert read[0].memory_ids, "the pinned memory is placed: the list is in the body"
    assert read[1].tokens <= 90 < read[0].tokens


async def test_each_message_reads_back_as_posted(client: httpx.AsyncClient) -> None:
    """The read's turns come as rows Postgres sends in binary, not as JSON text it
    escaped: every text reaches the body as posted, whatever it holds, and a tool
    call's stored JSON as it was stored."""
    arguments = '{"n": 123456789012345678901234567890, "x": 1.5e300, "s": "\\u00e9"}'
    posted = [
        {"role": "system", "content": "You book trips."},
        {"role": "user", "content": 'quote " backslash \\ slash / \u2028 \u2029 tab\t nl\n end'},
        {"role": "assistant", "content": None, "tool_calls": [call("c-1", "f\u00e9", arguments)]},
        {"role": "tool", "tool_call_id": "c-1", "content": '{"not": "parsed", "big": 1e999}'},
        {"role": "assistant", "content": "夏 🙂 é", "name": "planner"},
        {"role": "user", "content": " "},
    ]
    r = await post_turns(client, "s-posted", posted)
    assert r.status_code == 201, r.text
    got = await client.get("/v1/sessions/s-posted/context?max_tokens=4000")
    assert got.status_code == 200, got.text
    assert got.json()["messages"] == posted


# (url, caller): well-formed requests, which the route answers without FastAPI's
# solving (``QuickRoute``), and malformed ones, which FastAPI's handler must answer as
# it always did (its 422s, and the 401 it raises first, included).
AS_FASTAPI = [
    ("/v1/sessions/s-a/context", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=90", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=0090&memory_k=0&memory_tokens=0", "tenant"),
    ("/v1/sessions/s-a/context?memory_tokens=1000000&memory_k=500", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=63", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=1000001", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=12345678", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=abc", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=+90", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=%2090", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=", "tenant"),
    ("/v1/sessions/s-a/context?max_tokens=90&max_tokens=100", "tenant"),
    ("/v1/sessions/s-a/context?memory_k=501", "tenant"),
    ("/v1/sessions/s-a/context?query=the%20budget", "tenant"),
    ("/v1/sessions/s-a/context?query=the%20budget&max_tokens=200&memory_k=2", "tenant"),
    ("/v1/sessions/s-a/context?query=" + "x" * 4001, "tenant"),
    ("/v1/sessions/s-a/context?query=a%00b", "tenant"),
    ("/v1/sessions/s-a/context?other=1", "tenant"),
    ("/v1/sessions/s-none/context", "tenant"),
    ("/v1/sessions/bad%20id/context", "tenant"),
    ("/v1/sessions/" + "x" * 129 + "/context", "tenant"),
    ("/v1/sessions/s-bot/context", "bot"),
    ("/v1/sessions/s-bot/context?max_tokens=100", "bot"),
    ("/v1/sessions/s-other/context", "bot"),
    ("/v1/sessions/s-a/context", "bot"),
    ("/v1/sessions/s-bot/context", "other tenant"),
    ("/v1/sessions/s-a/context", None),
    ("/v1/sessions/s-a/context", "a revoked key"),
    ("/v1/sessions/s-a/context?max_tokens=abc", None),
]


async def test_the_short_way_answers_as_fastapi_does(
    client: httpx.AsyncClient, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, bot, other, stranger = await make_keys(
        client, engine, ("t", None), ("t", "bot"), ("t", "other"), ("u", None)
    )
    headers: dict[str | None, dict[str, str]] = {
        "tenant": tenant,
        "bot": bot,
        "other tenant": stranger,
        None: {},
        "a revoked key": {"Authorization": "Bearer mn_not-a-key"},
    }
    turns = [
        {"role": "user", "content": "Keep the budget under 2,000 euros."},
        {"role": "assistant", "content": "Noted: under 2,000 euros."},
    ]
    for session, key in (("s-a", tenant), ("s-bot", bot), ("s-other", other)):
        r = await client.post(
            f"/v1/sessions/{session}/turns", json={"user_id": "u-1", "messages": turns}, headers=key
        )
        assert r.status_code == 201, r.text

    async def read(url: str, caller: str | None) -> tuple[int, bytes, list[tuple[str, str]]]:
        r = await client.get(url, headers=headers[caller])
        kept = [(k, v) for k, v in r.headers.multi_items() if k != "x-request-id"]
        return r.status_code, r.content, kept

    solved = solving_recorded(monkeypatch)
    short = [await read(url, caller) for url, caller in AS_FASTAPI]
    taken_by_fastapi = list(solved)
    app = app_of(client)
    app.dependency_overrides[get_settings] = get_settings  # every request: FastAPI's way
    try:
        standard = [await read(url, caller) for url, caller in AS_FASTAPI]
    finally:
        app.dependency_overrides.clear()
    for case, a, b in zip(AS_FASTAPI, short, standard, strict=True):
        assert a == b, case
    assert {s for s, _, _ in standard} == {200, 401, 404, 422}
    # FastAPI's handler took exactly the requests whose parameters it refuses (with the
    # tenant's key: 422), whoever called; every other one went the short way.
    answered = zip(AS_FASTAPI, standard, strict=True)
    refused = {url for (url, _), (status, _, _) in answered if status == 422}
    assert sorted(taken_by_fastapi) == sorted(
        "{}?{}".format(*url.split("?", 1)) if "?" in url else f"{url}?"
        for url, _ in AS_FASTAPI
        if url in refused
    )

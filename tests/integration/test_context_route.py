"""GET /v1/sessions/{id}/context as the route writes it, against real Postgres: the body
is ``ContextOut``'s JSON to the byte, and a read resolves no dependency but the caller's
key and the session's owner (FastAPI solves every node of a route's dependency tree on
every request: the tree was a fifth of a one-client read's CPU)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
from fastapi.dependencies.models import Dependant

from app.api.deps import bearer, get_principal, own_session
from app.api.routes import sessions
from app.api.schemas import ContextOut
from tests.conftest import post_turns
from tests.integration.test_context import call


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any] | None]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


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

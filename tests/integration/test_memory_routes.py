"""POST and GET /v1/users/{id}/memories as the routes write them, against real Postgres:
a body is its response model's JSON to the byte, and an add or a search resolves no
dependency but the caller's key (FastAPI solves every node of a route's dependency tree
on every request; these are the memory API's hot paths)."""

from __future__ import annotations

from typing import Any

import httpx

from app.api.deps import bearer, get_principal
from app.api.routes import memories
from app.api.schemas import MemoriesOut, MemoryPublic
from tests.integration.test_context_route import _calls


def test_an_add_and_a_search_resolve_only_the_callers_key() -> None:
    for name in ("create_memory", "list_memories"):
        (route,) = [r for r in memories.router.routes if getattr(r, "name", "") == name]
        assert set(_calls(route.dependant)) == {get_principal, bearer}, name


def _exact(got: httpx.Response, model: type[MemoryPublic] | type[MemoriesOut]) -> Any:
    assert got.headers["content-type"] == "application/json"
    assert int(got.headers["content-length"]) == len(got.content)
    parsed = model.model_validate_json(got.content)
    assert got.content == parsed.model_dump_json().encode()
    return parsed


async def test_the_bodies_are_the_response_models_json_to_the_byte(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "text": 'Prefers the "quiet" carriage on the 07:45 to Zürich 苏黎世',
        "kind": "preference",
        "metadata": {"topic": "a\u2028b\tc", "n": 12345678901, "ratio": 0.25, "t": [True, None]},
    }
    added = await client.post("/v1/users/u-bytes/memories", json=body)
    assert added.status_code == 201, added.text
    first = _exact(added, MemoryPublic)
    assert first.text == body["text"] and first.metadata == body["metadata"]
    assert first.deduplicated is False and first.source == {"api": True}
    again = await client.post("/v1/users/u-bytes/memories", json=body)
    assert again.status_code == 201, again.text
    confirmed = _exact(again, MemoryPublic)
    assert confirmed.id == first.id and confirmed.deduplicated and confirmed.times_confirmed == 2
    pinned = await client.post(
        "/v1/users/u-bytes/memories",
        json={"text": "Allergic to peanuts.", "kind": "high_stakes", "pinned": True},
    )
    assert pinned.status_code == 201, pinned.text

    found = await client.get(
        "/v1/users/u-bytes/memories", params={"query": "quiet carriage Zürich", "limit": 5}
    )
    assert found.status_code == 200, found.text
    hits = _exact(found, MemoriesOut).memories
    assert hits[0].id == first.id and hits[0].score is not None
    listed = await client.get("/v1/users/u-bytes/memories")
    assert listed.status_code == 200, listed.text
    assert [m.id for m in _exact(listed, MemoriesOut).memories] == [
        pinned.json()["id"],
        first.id,
    ]
    for url in ("/v1/users/nobody/memories", "/v1/users/nobody/memories?query=carriage"):
        assert (await client.get(url)).status_code == 404

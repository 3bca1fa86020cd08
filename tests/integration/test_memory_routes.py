"""POST and GET /v1/users/{id}/memories as the routes write them, against real Postgres:
a body is its response model's JSON to the byte, and an add or a search resolves no
dependency but the caller's key (FastAPI solves every node of a route's dependency tree
on every request; these are the memory API's hot paths)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.deps import bearer, get_principal, get_settings
from app.api.routes import memories
from app.api.schemas import MemoriesOut, MemoryPublic
from app.services.auth import DEFAULT_TENANT
from app.stores.memories import MemoryRow
from tests.integration.test_auth import app_of, make_key
from tests.integration.test_auth import bearer as bearer_header
from tests.integration.test_context_route import _calls, solving_recorded


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


def test_a_body_with_an_integer_past_64_bits_is_written_as_pydantic_writes_it() -> None:
    """orjson refuses such an integer (JSON, and jsonb, hold it): pydantic writes it."""
    now = datetime(2026, 12, 2, 0, 1, 2, 120000, tzinfo=UTC)
    row = MemoryRow(
        id=7,
        kind="fact",
        text="é \u2028 \x01",
        pinned=False,
        source={"api": True},
        metadata={"big": 10**30, "f": 0.1 + 0.2, "tiny": 5e-324},
        created_at=now,
        last_confirmed_at=now.replace(microsecond=0),
        times_confirmed=1,
        expires_at=None,
        superseded_by=None,
        session_id=None,
        embedding_model=None,
        score=0.016393,
    )
    for rows in ([row], [replace(row, metadata={"f": 0.1 + 0.2, "tiny": 5e-324})]):
        model = MemoriesOut.model_construct(memories=[memories.public(r) for r in rows])
        assert memories.memories_body(rows) == model.model_dump_json().encode()
        one = memories.public(rows[0], deduplicated=True).model_dump_json().encode()
        assert memories.memory_body(rows[0], deduplicated=True) == one


async def _seeded(client: httpx.AsyncClient) -> None:
    for text in ("Prefers aisle seats", "Allergic to peanuts", "Flies to Zürich on Mondays"):
        r = await client.post("/v1/users/u-q/memories", json={"text": text})
        assert r.status_code == 201, r.text


# Well-formed and malformed searches: what FastAPI's handler answers, the route answers.
SEARCHES = [
    "query=aisle+seats&limit=10",
    "query=aisle+seats",
    "query=peanuts&limit=1&kind=fact",
    "query=peanuts&limit=200",
    "query=peanuts&limit=201",
    "query=peanuts&limit=0",
    "query=peanuts&limit=%2B2",
    "query=peanuts&limit=2.0",
    "query=peanuts&limit=abc",
    "query=peanuts&limit=",
    "query=peanuts&limit=5&limit=1",
    "query=peanuts&kind=nonsense",
    "query=peanuts&kind=",
    "query=peanuts&unknown=1",
    "query=a%00b",
    "query=" + "x" * 4001,
    "query=" + "x" * 4000,
    "query=",
    "query=+++",
    "limit=2",
    "",
]


async def _answers(
    client: httpx.AsyncClient, user: str, headers: dict[str, str] | None = None
) -> list[tuple[int, str, bytes]]:
    out = []
    for qs in SEARCHES:
        r = await client.get(f"/v1/users/{user}/memories?{qs}", headers=headers)
        out.append((r.status_code, r.headers["content-type"], r.content))
    return out


async def test_a_search_answers_as_fastapis_handler_does(
    client: httpx.AsyncClient, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search route validates a request's parameters itself and calls the endpoint
    (``QuickRoute``) unless that fails: every answer, an error's included, is the one
    FastAPI's own handler gives (forced here by a dependency override, as in tests)."""
    await _seeded(client)
    solved = solving_recorded(monkeypatch)
    app = app_of(client)
    users = ["u-q", "nobody", "bad%20id", "x" * 129]

    quick = [await _answers(client, user) for user in users]
    asked = [f"/v1/users/{user}/memories?{qs}" for user in users for qs in SEARCHES]
    answered = [answer for answers in quick for answer in answers]
    # FastAPI's handler took exactly the requests it refuses; every other one, none.
    assert sorted(solved) == sorted(
        url for url, (status, _, _) in zip(asked, answered, strict=True) if status == 422
    )
    assert {status for status, _, _ in answered} == {200, 404, 422}

    app.dependency_overrides[get_settings] = get_settings  # every request: FastAPI's way
    try:
        checked = [await _answers(client, user) for user in users]
    finally:
        app.dependency_overrides.clear()
    assert quick == checked


async def test_a_search_with_keys_answers_as_fastapis_handler_does(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """The caller's key is read as the dependency reads it: none, a wrong one, another
    scheme, and a good one give what FastAPI's handler gives."""
    key = await make_key(engine, DEFAULT_TENANT)
    app = app_of(client)
    app.state.guard.forget()
    await _seeded_with(client, key)
    heads: list[dict[str, str] | None] = [
        None,
        bearer_header("mnemo_wrong_key"),
        {"Authorization": f"Basic {key}"},
        {"Authorization": f"bearer {key}"},
        bearer_header(key),
    ]
    quick = [await _answers(client, "u-q", h) for h in heads]
    app.dependency_overrides[get_settings] = get_settings
    try:
        checked = [await _answers(client, "u-q", h) for h in heads]
    finally:
        app.dependency_overrides.clear()
    assert quick == checked
    assert {status for answers in quick for status, _, _ in answers} == {200, 401, 422}


async def _seeded_with(client: httpx.AsyncClient, key: str) -> None:
    for text in ("Prefers aisle seats", "Allergic to peanuts"):
        r = await client.post(
            "/v1/users/u-q/memories", json={"text": text}, headers=bearer_header(key)
        )
        assert r.status_code == 201, r.text


async def test_a_search_holds_one_pooled_connection_outside_any_transaction(
    client: httpx.AsyncClient, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search route checks a connection out of the pool for the driver alone
    (``driver_checkout``): its statements run outside a transaction, and the connection
    is back in the pool after a search, a search of an unknown user (404), and one
    whose statement fails."""
    await _seeded(client)
    seen: list[tuple[bool, int]] = []
    checkout = memories.driver_checkout

    @contextlib.asynccontextmanager
    async def watched(eng: AsyncEngine) -> AsyncIterator[asyncpg.Connection]:
        async with checkout(eng) as db:
            seen.append((db.is_in_transaction(), eng.pool.checkedout()))  # type: ignore[attr-defined]
            yield db

    monkeypatch.setattr(memories, "driver_checkout", watched)
    r = await client.get("/v1/users/u-q/memories", params={"query": "aisle seats"})
    assert r.status_code == 200 and r.json()["memories"][0]["text"] == "Prefers aisle seats"
    r = await client.get("/v1/users/nobody/memories", params={"query": "aisle seats"})
    assert r.status_code == 404
    assert seen == [(False, 1), (False, 1)]
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]

    async def failing(db: asyncpg.Connection, **_: Any) -> None:
        await db.fetch("SELECT 1 / 0")

    monkeypatch.setattr(memories, "search_memories", failing)
    r = await client.get("/v1/users/u-q/memories", params={"query": "aisle seats"})
    assert r.status_code == 500  # the driver's error, as a problem
    assert r.headers["content-type"].startswith("application/problem+json")
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    r = await client.get("/v1/users/u-q/memories")  # the pool's connections still serve
    assert r.status_code == 200

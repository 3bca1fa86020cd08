"""A memory search whose embedding service fails while its first statement is in flight.

The search posts its query to the embedding service before it sends its first statement
(the user look-up with the lexical leg), and the two run at once. An embedding that
fails (an HTTP 503, a refused connection) is answered with a 503 problem and Retry-After
(one that answers with an error, a 4xx, with a 502), and only once the statement under
way has been answered: the connection goes back to the pool idle, with nothing in flight.
An unknown user is still a 404, whatever the embedder does. A context read with an
explicit query is still served when the embedding fails: from the lexical leg alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.routes import memories
from app.stores import memories as repo
from app.stores.tables import EMBEDDING_DIM
from app.wiring import create_app
from tests.conftest import make_settings
from tests.integration.test_outbound_http import Server, fixed, vectors_body

IN_FLIGHT_S = 0.2  # how long the first statement is kept in flight by the test


def scripted(statuses: list[int]) -> Any:
    """An embedding endpoint answering each request with the next status (200: a vector)."""
    left = iter(statuses)

    async def answer(body: bytes, writer: asyncio.StreamWriter) -> bool:
        status = next(left)
        if status == 200:
            return await fixed(vectors_body(body, [1.0] + [0.0] * (EMBEDDING_DIM - 1)))(
                body, writer
            )
        problem = orjson.dumps({"error": {"message": "overloaded"}})
        writer.write(
            b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(problem), problem)
        )
        return True

    return answer


@contextlib.asynccontextmanager
async def app_over(
    base_url: str, db_url: str, engine: AsyncEngine
) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(
        db_url,
        embedder="openai",
        embedding_base_url=base_url,
        embedding_model="m",
        query_cache_size=0,
    )
    app = create_app(settings, database_url=settings.async_database_url or "", engine=engine)
    async with app.router.lifespan_context(app):
        # As a server answers: the 500 problem, not the exception Starlette raises after it.
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as client:
            yield client


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[asyncpg.Connection]:
    """The driver connection of each search; its first statement is kept in flight
    ``IN_FLIGHT_S`` longer (a ``pg_sleep`` before it), so the embedding fails first."""
    seen: list[asyncpg.Connection] = []
    checkout = memories.driver_checkout
    lexical = repo.lexical_ranking_for_user

    @contextlib.asynccontextmanager
    async def watched(eng: AsyncEngine) -> AsyncIterator[asyncpg.Connection]:
        async with checkout(eng) as db:
            seen.append(db)
            yield db

    async def slow(db: asyncpg.Connection, **kwargs: Any) -> Any:
        await db.execute(f"SELECT pg_sleep({IN_FLIGHT_S})")
        return await lexical(db, **kwargs)

    monkeypatch.setattr(memories, "driver_checkout", watched)
    monkeypatch.setattr(repo, "lexical_ranking_for_user", slow)
    return seen


async def test_an_embedding_that_fails_under_the_first_statement_is_a_503_problem(
    db_url: str, engine: AsyncEngine, held: list[asyncpg.Connection]
) -> None:
    async with Server(scripted([200, 503, 200])) as server:
        async with app_over(f"{server.url}/v1", db_url, engine) as client:
            added = await client.post(
                "/v1/users/u-e/memories", json={"text": "Prefers aisle seats"}
            )
            assert added.status_code == 201, added.text
            ok = await client.get("/v1/users/u-e/memories", params={"query": "aisle seats"})
            assert ok.status_code == 200, ok.text
            failed = await client.get("/v1/users/u-e/memories", params={"query": "aisle"})
            assert failed.status_code == 503
            assert failed.headers["content-type"].startswith("application/problem+json")
            assert failed.headers["retry-after"]
            assert "embedding service" in failed.json()["detail"]
            assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
            # Nothing left in flight on the failed search's connection: it answers at once
            # (a statement still running would raise "another operation is in progress").
            assert await held[-1].fetchval("SELECT 1") == 1
            again = await client.get("/v1/users/u-e/memories", params={"query": "aisle seats"})
            assert again.status_code == 200
            assert [m["text"] for m in again.json()["memories"]] == ["Prefers aisle seats"]
    assert len(server.requests) == 3


async def test_an_unreachable_embedder_and_an_unknown_user(
    db_url: str, engine: AsyncEngine, held: list[asyncpg.Connection]
) -> None:
    closed = Server(fixed(b""))
    async with closed:
        port = closed.port
    async with app_over(f"http://127.0.0.1:{port}/v1", db_url, engine) as client:
        added = await client.post("/v1/users/u-r/memories", json={"text": "Prefers aisle seats"})
        assert added.status_code == 201, added.text
        failed = await client.get("/v1/users/u-r/memories", params={"query": "aisle"})
        assert failed.status_code == 503
        assert failed.headers["content-type"].startswith("application/problem+json")
        unknown = await client.get("/v1/users/nobody/memories", params={"query": "aisle"})
        assert unknown.status_code == 404
        assert unknown.headers["content-type"].startswith("application/problem+json")
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        for db in held:
            assert await db.fetchval("SELECT 1") == 1


async def test_an_embedding_service_that_refuses_the_query_is_a_502_problem(
    db_url: str, engine: AsyncEngine
) -> None:
    async with Server(scripted([400])) as server:
        async with app_over(f"{server.url}/v1", db_url, engine) as client:
            added = await client.post("/v1/users/u-b/memories", json={"text": "Likes tea"})
            assert added.status_code == 201, added.text
            failed = await client.get("/v1/users/u-b/memories", params={"query": "tea"})
            assert failed.status_code == 502, failed.text
            assert failed.headers["content-type"].startswith("application/problem+json")
            assert "embedding service" in failed.json()["detail"]


async def test_a_context_read_survives_a_failing_embedding_service(
    db_url: str, engine: AsyncEngine
) -> None:
    """The context's memory block comes from the lexical leg when the query's embedding
    fails; the memory that shares words with the query is in it."""
    async with Server(scripted([503, 503])) as server:
        async with app_over(f"{server.url}/v1", db_url, engine) as client:
            added = await client.post(
                "/v1/users/u-c/memories", json={"text": "Allergic to peanuts", "pinned": False}
            )
            assert added.status_code == 201, added.text
            posted = await client.post(
                "/v1/sessions/s-c/turns",
                json={"user_id": "u-c", "messages": [{"role": "user", "content": "Hello"}]},
            )
            assert posted.status_code in (200, 201), posted.text
            read = await client.get(
                "/v1/sessions/s-c/context", params={"query": "peanuts allergy", "max_tokens": 2000}
            )
            assert read.status_code == 200, read.text
            assert "Allergic to peanuts" in orjson.dumps(read.json()).decode()
    assert len(server.requests) >= 1  # the embedding was asked for, and failed

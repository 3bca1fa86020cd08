"""A memory search's order of work: its query is embedded while Postgres answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.config import Settings
from app.providers.embed import Embedder
from app.wiring import create_app


class Watched:
    """The app's embedder, saying when a query's embedding starts."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.model_id = self._inner.model_id
        self.dim = self._inner.dim
        self.started = asyncio.Event()
        self.queries: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.queries.extend(texts)
        self.started.set()
        return await self._inner.embed(texts)


@pytest.fixture
async def app_client(
    settings: Settings, engine: AsyncEngine
) -> AsyncIterator[tuple[httpx.AsyncClient, Watched]]:
    app = create_app(settings, database_url=settings.async_database_url or "", engine=engine)
    async with app.router.lifespan_context(app):
        watched = app.state.embedder = Watched(app.state.embedder)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as client:
            yield client, watched


async def test_the_query_is_embedded_while_the_user_is_looked_up(
    app_client: tuple[httpx.AsyncClient, Watched], engine: AsyncEngine
) -> None:
    """The query vector needs nothing from the database, so the search starts it before
    its first statement is answered: here the users table is locked, the lookup waits,
    and the embedding has started all the same."""
    client, watched = app_client
    r = await client.post("/v1/users/u-1/memories", json={"text": "Prefers aisle seats"})
    assert r.status_code == 201, r.text
    async with engine.connect() as locker:
        await locker.execute(text("LOCK TABLE users IN ACCESS EXCLUSIVE MODE"))
        search = asyncio.create_task(
            client.get("/v1/users/u-1/memories", params={"query": "aisle seats"})
        )
        try:
            await asyncio.wait_for(watched.started.wait(), timeout=10)
            assert not search.done()  # the lookup still waits for the lock
        finally:
            await locker.rollback()  # the lock goes; the search goes on
    r = await search
    assert r.status_code == 200, r.text
    assert [m["text"] for m in r.json()["memories"]] == ["Prefers aisle seats"]
    assert watched.queries == ["aisle seats"]


async def test_an_unknown_user_is_404_whatever_the_embedding(
    app_client: tuple[httpx.AsyncClient, Watched],
) -> None:
    client, _ = app_client
    r = await client.get("/v1/users/nobody/memories", params={"query": "aisle seats"})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")

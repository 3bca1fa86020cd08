"""A memory search's order of work: its query is embedded while Postgres answers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core import jsonio
from app.core.config import Settings
from app.memories.bm25 import search_terms
from app.providers.embed import Embedder, HashEmbedder
from app.services.auth import DEFAULT_TENANT
from app.services.memories import hybrid_search
from app.stores import memories as repo
from app.stores import sessions
from app.stores.engine import autocommit, driver_connection
from app.stores.tables import EMBEDDING_DIM
from app.wiring import build_embedder_from_settings, create_app
from tests.integration.statements import recorded_statements
from tests.integration.test_memories import drain


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


class WatchedLocal(Watched):
    """The same, computing in this process: the search may run it on its own thread."""

    def __init__(self, inner: HashEmbedder) -> None:
        super().__init__(inner)
        self._local = inner
        self.here: list[tuple[str, int]] = []  # (text, thread)

    def embed_here(self, text: str) -> list[float] | None:
        self.here.append((text, threading.get_ident()))
        self.started.set()
        return self._local.embed_one(text)


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


async def search_under_lock(
    client: httpx.AsyncClient, engine: AsyncEngine, started: asyncio.Event
) -> httpx.Response:
    """A search for a stored memory fired while the users table is locked: ``started``
    must be set (the embedding begun) while the search's first statement waits."""
    r = await client.post("/v1/users/u-1/memories", json={"text": "Prefers aisle seats"})
    assert r.status_code == 201, r.text
    async with engine.connect() as locker:
        await locker.execute(text("LOCK TABLE users IN ACCESS EXCLUSIVE MODE"))
        search = asyncio.create_task(
            client.get("/v1/users/u-1/memories", params={"query": "aisle seats"})
        )
        try:
            await asyncio.wait_for(started.wait(), timeout=10)
            assert not search.done()  # the first statement still waits for the lock
        finally:
            await locker.rollback()  # the lock goes; the search goes on
    r = await search
    assert r.status_code == 200, r.text
    assert [m["text"] for m in r.json()["memories"]] == ["Prefers aisle seats"]
    return r


async def test_the_query_is_embedded_while_the_user_is_looked_up(
    app_client: tuple[httpx.AsyncClient, Watched], engine: AsyncEngine
) -> None:
    """The query vector needs nothing from the database, so the search starts it before
    its first statement is answered: here the users table is locked, the lookup waits,
    and the embedding has started all the same."""
    client, watched = app_client
    await search_under_lock(client, engine, watched.started)
    assert watched.queries == ["aisle seats"]


async def test_an_unknown_user_is_404_whatever_the_embedding(
    app_client: tuple[httpx.AsyncClient, Watched],
) -> None:
    client, _ = app_client
    r = await client.get("/v1/users/nobody/memories", params={"query": "aisle seats"})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")


async def test_a_local_model_embeds_the_query_on_the_loop_while_the_lookup_waits(
    settings: Settings, engine: AsyncEngine
) -> None:
    """An embedder computing in this process runs its pass on the event loop's thread,
    after the search's first statement has gone out (here it waits for a lock on the
    users table): no hand-off to a thread, and the pass overlaps Postgres's answer."""
    app = create_app(settings, database_url=settings.async_database_url or "", engine=engine)
    async with app.router.lifespan_context(app):
        local = app.state.embedder = WatchedLocal(HashEmbedder(EMBEDDING_DIM))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as client:
            await search_under_lock(client, engine, local.started)
    assert local.here == [("aisle seats", threading.get_ident())]
    assert local.queries == []  # never through embed (a thread, or a task)


async def test_a_search_is_two_statements_the_lookup_with_the_lexical_leg_then_the_vector_leg(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    for fact in ("Prefers aisle seats on long flights", "Allergic to peanuts"):
        r = await client.post("/v1/users/u-1/memories", json={"text": fact})
        assert r.status_code == 201, r.text
    await drain(engine, db_url)  # embedded: the vector leg has rows to rank
    with recorded_statements(engine) as statements:
        r = await client.get("/v1/users/u-1/memories", params={"query": "aisle seats"})
        await asyncio.sleep(0)
    assert r.status_code == 200, r.text
    assert r.json()["memories"][0]["text"] == "Prefers aisle seats on long flights"
    # and, on a connection's first search and then every 10 s, a look at the statistics
    # (which routed vector statement the connection runs)
    searched = [s for s in statements if s != repo.SETTLED_STATISTICS]
    assert len(searched) == 2, statements
    assert len(statements) - len(searched) <= 1, statements  # one look at most, not per leg
    assert "FROM users" in searched[0] and "memory_terms" in searched[0]
    assert "memory_vectors" in searched[1]


async def test_the_lookup_with_the_lexical_leg_reads_what_the_two_apart_read(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """The folded statement ranks exactly as the lookup followed by the lexical leg, for
    a user with hits, without hits, with no terms, by kind, and tells an unknown user
    (and a user of another tenant) from a user with nothing found."""
    facts = {
        "u-1": ["Prefers aisle seats on long flights", "Window seat on short hops", "Tea, no milk"],
        "u-2": ["Aisle seat always", "Vegetarian meals on flights"],
    }
    for user, texts in facts.items():
        for i, fact in enumerate(texts):
            r = await client.post(
                f"/v1/users/{user}/memories",
                json={"text": fact, "kind": "preference" if i % 2 == 0 else "fact"},
            )
            assert r.status_code == 201, r.text
    async with autocommit(engine) as conn:
        db = await driver_connection(conn)
        for user in ("u-1", "u-2"):
            user_pk = await sessions.user_pk_on_driver(db, tenant=DEFAULT_TENANT, user=user)
            assert user_pk is not None
            for query, kind in [
                ("aisle seats flights", None),
                ("aisle seats flights", "preference"),
                ("milk", None),
                ("submarine", None),
                ("", None),
            ]:
                terms = search_terms(query)
                apart = await repo.lexical_search(db, user_pk=user_pk, terms=terms, k=20, kind=kind)
                folded = await repo.lexical_search_for_user(
                    db, tenant=DEFAULT_TENANT, user=user, terms=terms, k=20, kind=kind
                )
                assert folded == (user_pk, apart), (user, query, kind)
        assert (
            await repo.lexical_search_for_user(
                db, tenant=DEFAULT_TENANT, user="nobody", terms=["aisl"], k=20
            )
            is None
        )
        assert (
            await repo.lexical_search_for_user(
                db, tenant="elsewhere", user="u-1", terms=["aisl"], k=20
            )
            is None
        )


async def test_a_context_query_is_embedded_on_the_loop_while_the_lexical_leg_waits(
    settings: Settings, engine: AsyncEngine
) -> None:
    """/context?query= embeds its query as the memory search does: a model computing in
    this process runs its pass on the event loop's thread once the lexical statement has
    gone out (here it waits for a lock on the postings), not in a thread after a hand-off."""
    app = create_app(settings, database_url=settings.async_database_url or "", engine=engine)
    async with app.router.lifespan_context(app):
        local = app.state.embedder = WatchedLocal(HashEmbedder(EMBEDDING_DIM))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as client:
            r = await client.post("/v1/users/u-1/memories", json={"text": "Prefers aisle seats"})
            assert r.status_code == 201, r.text
            r = await client.post(
                "/v1/sessions/s-1/turns",
                json={"user_id": "u-1", "messages": [{"role": "user", "content": "Hello"}]},
            )
            assert r.status_code in (200, 201), r.text
            async with engine.connect() as locker:
                await locker.execute(text("LOCK TABLE memory_terms IN ACCESS EXCLUSIVE MODE"))
                read = asyncio.create_task(
                    client.get(
                        "/v1/sessions/s-1/context",
                        params={"query": "aisle seats", "max_tokens": 500},
                    )
                )
                try:
                    await asyncio.wait_for(local.started.wait(), timeout=10)
                    assert not read.done()  # the lexical leg still waits for the lock
                finally:
                    await locker.rollback()
            r = await read
    assert r.status_code == 200, r.text
    assert "Prefers aisle seats" in r.json()["text"]
    assert local.here == [("aisle seats", threading.get_ident())]
    assert local.queries == []  # never through embed (a thread, or a task)


async def test_a_hybrid_search_decodes_only_the_memories_the_fusion_keeps(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    db_url: str,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each leg reads 20 candidates; a search for 3 builds 3 memories: the JSON documents
    (source, metadata) of the candidates the fusion drops are never decoded."""
    for i in range(24):
        r = await client.post(
            "/v1/users/u-1/memories",
            json={"text": f"Seat preference number {i}", "metadata": {"n": i}},
        )
        assert r.status_code == 201, r.text
    await drain(engine, db_url)  # embedded: both legs have candidates
    decoded: list[object] = []
    loads = jsonio.loads

    def counted(document: str | bytes) -> object:
        decoded.append(document)
        return loads(document)

    async with autocommit(engine) as conn, httpx.AsyncClient() as http:
        db = await driver_connection(conn)
        user_pk = await sessions.user_pk_on_driver(db, tenant=DEFAULT_TENANT, user="u-1")
        assert user_pk is not None
        embedder = build_embedder_from_settings(settings, http)
        full = await hybrid_search(
            db, user_pk=user_pk, query="seat preference", k=20, embedder=embedder
        )
        monkeypatch.setattr(jsonio, "loads", counted)
        found = await hybrid_search(
            db, user_pk=user_pk, query="seat preference", k=3, embedder=embedder
        )
    assert found == full[:3]  # the same memories, documents and scores
    assert [m.metadata["n"] for m in found] == [m.metadata["n"] for m in full[:3]]
    assert len(decoded) == 2 * len(found)  # each kept memory's source and metadata

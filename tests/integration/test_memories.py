"""Long-term memory through HTTP: CRUD, restatement, search, TTL, erase, isolation."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.services.memory_jobs import move_heavy
from app.stores import api_keys as keys
from app.stores.engine import driver_connection
from app.wiring import build_worker
from tests.conftest import make_settings, post_turns
from tests.integration.statements import recorded_statements


async def remember(client: httpx.AsyncClient, user: str, text_: str, **kw: object) -> dict:
    r = await client.post(f"/v1/users/{user}/memories", json={"text": text_, **kw})
    assert r.status_code == 201, r.text
    return r.json()


async def drain(engine: AsyncEngine, db_url: str) -> None:
    """Run every runnable job (embeddings, indexing) with the test embedder."""
    settings = make_settings(db_url)
    async with httpx.AsyncClient() as http:
        from app.wiring import build_embedder_from_settings

        worker = build_worker(
            settings, engine, http=http, embedder=build_embedder_from_settings(settings, http)
        )
        while await worker.run_once() is not None:
            pass


async def test_create_restate_list_delete(client: httpx.AsyncClient) -> None:
    m = await remember(client, "u-1", "I prefer aisle seats.", kind="preference")
    assert m["kind"] == "preference" and m["pinned"] is False and m["deduplicated"] is False
    assert m["expires_at"] is not None and m["times_confirmed"] == 1
    again = await remember(client, "u-1", "  I prefer   aisle seats. ", kind="preference")
    assert again["id"] == m["id"] and again["deduplicated"] is True
    assert again["times_confirmed"] == 2
    pinned = await remember(
        client, "u-1", "Allergic to penicillin.", kind="high_stakes", pinned=True
    )
    assert pinned["expires_at"] is None
    listed = (await client.get("/v1/users/u-1/memories")).json()["memories"]
    assert [x["id"] for x in listed] == [pinned["id"], m["id"]]  # pinned first
    only = (await client.get("/v1/users/u-1/memories", params={"kind": "preference"})).json()
    assert [x["id"] for x in only["memories"]] == [m["id"]]
    assert (await client.delete(f"/v1/users/u-1/memories/{m['id']}")).status_code == 204
    assert (await client.delete(f"/v1/users/u-1/memories/{m['id']}")).status_code == 404
    assert (await client.get("/v1/users/nobody/memories")).status_code == 404


async def test_bad_memory_input(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/users/u/memories", json={"text": ""})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.text"
    r = await client.post("/v1/users/u/memories", json={"text": "x", "kind": "gossip"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.kind"
    r = await client.post("/v1/users/u/memories", json={"text": "x", "ttl_days": 0})
    assert r.status_code == 422


async def test_search_is_hybrid_and_handles_chinese_and_ids(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    await remember(client, "u", "Booking reference for the Tokyo trip is QX7T2L.")
    await remember(client, "u", "我对花生过敏，点餐时要注意。", kind="high_stakes")
    await remember(client, "u", "Prefers answers in bullet points.", kind="preference")
    await drain(engine, db_url)
    r = (await client.get("/v1/users/u/memories", params={"query": "QX7T2L"})).json()
    assert r["memories"][0]["text"].endswith("QX7T2L.") and r["memories"][0]["score"] > 0
    r = (await client.get("/v1/users/u/memories", params={"query": "花生"})).json()
    assert "花生" in r["memories"][0]["text"]


async def test_expired_memories_disappear_and_are_swept_pinned_stay(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    old = await remember(client, "u", "Working on the Q3 report.", ttl_days=1)
    keep = await remember(client, "u", "Blood type O negative.", kind="high_stakes", pinned=True)
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE memories SET expires_at = now() - interval '1 hour' WHERE id = :id"),
            {"id": old["id"]},
        )
    listed = (await client.get("/v1/users/u/memories")).json()["memories"]
    assert [m["id"] for m in listed] == [keep["id"]]
    from app.services.memory_jobs import sweep_expired

    assert await sweep_expired(engine) == 1
    async with engine.connect() as conn:
        ids = (await conn.execute(text("SELECT id FROM memories"))).scalars().all()
    assert ids == [keep["id"]]


async def test_erase_user_takes_everything_and_needs_admin(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await post_turns(client, "s-1", [{"role": "user", "content": "hello"}], user="gone")
    await remember(client, "gone", "Likes jazz.")
    await post_turns(client, "s-2", [{"role": "user", "content": "hi"}], user="stays")
    assert (await client.delete("/v1/users/gone")).status_code == 204
    async with engine.connect() as conn:
        for table, expected in (("users", 1), ("sessions", 1), ("turns", 1), ("memories", 0)):
            n = (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
            assert n == expected, table
    assert (await client.get("/v1/sessions/s-1")).status_code == 404
    assert (await client.delete("/v1/users/gone")).status_code == 404

    async with engine.begin() as conn:
        agent = await keys.create_key(conn, tenant="default", scope="agent")
    client._transport.app.state.guard.forget()  # type: ignore[attr-defined]
    r = await client.delete("/v1/users/stays", headers={"Authorization": f"Bearer {agent}"})
    assert r.status_code == 403


async def test_memories_are_tenant_and_user_scoped(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        a = await keys.create_key(conn, tenant="a", scope="agent")
        b = await keys.create_key(conn, tenant="b", scope="agent")
    client._transport.app.state.guard.forget()  # type: ignore[attr-defined]
    ha, hb = {"Authorization": f"Bearer {a}"}, {"Authorization": f"Bearer {b}"}
    r = await client.post("/v1/users/u/memories", json={"text": "secret code 4242"}, headers=ha)
    mid = r.json()["id"]
    assert (await client.get("/v1/users/u/memories", headers=hb)).status_code == 404
    assert (await client.delete(f"/v1/users/u/memories/{mid}", headers=hb)).status_code == 404
    await client.post("/v1/users/u/memories", json={"text": "b's note"}, headers=hb)
    listed = (await client.get("/v1/users/u/memories", headers=hb)).json()["memories"]
    assert [m["text"] for m in listed] == ["b's note"]
    r = await client.get("/v1/users/other/memories", params={"query": "4242"}, headers=ha)
    assert r.status_code == 404


async def test_vectors_of_another_model_are_refused_until_reembedded(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    from app.providers.embed import EmbeddingModelMismatch, HashEmbedder
    from app.services.memories import reembed
    from app.wiring import create_app

    m = await remember(client, "u", "Likes green tea.")
    await drain(engine, db_url)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE memories SET embedding_model = 'old-model'"))
    app = create_app(make_settings(db_url), database_url=db_url, engine=engine)
    with pytest.raises(EmbeddingModelMismatch, match="mnemo reembed"):
        async with app.router.lifespan_context(app):
            pass
    async with engine.begin() as conn:
        assert await reembed(conn, HashEmbedder(512), max_attempts=3) == 1
    await drain(engine, db_url)
    async with engine.connect() as conn:
        model = (
            await conn.execute(
                text("SELECT embedding_model FROM memories WHERE id = :id"), {"id": m["id"]}
            )
        ).scalar_one()
    assert model == "hash-ngram-v1"
    async with app.router.lifespan_context(app):
        pass  # starts again


async def test_heavy_users_search_through_hnsw_and_always_get_k(
    client: httpx.AsyncClient, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past EXACT_SCAN_MAX a user is searched through HNSW, filtered inside the index
    scan; with many other users' rows around, k results still come back, all theirs."""
    import random

    from app.memories.vectors import l2_normalize
    from app.stores import memories as memory_repo
    from app.stores import sessions

    monkeypatch.setattr(memory_repo, "EXACT_SCAN_MAX", 20)
    rng = random.Random(7)
    async with engine.begin() as conn:
        users = [
            await sessions.ensure_user(conn, tenant="default", user=f"u{i}") for i in range(30)
        ]
        for user_pk in users:
            for j in range(40):
                mid = await memory_repo.insert_memory(
                    conn,
                    tenant="default",
                    user_pk=user_pk,
                    kind="fact",
                    text_=f"m{j}",
                    text_key=f"{user_pk}-{j}",
                    pinned=False,
                    ttl_days=None,
                    source={},
                    metadata={},
                    terms=[],
                )
                vector = l2_normalize([rng.gauss(0, 1) for _ in range(512)])
                await memory_repo.set_embedding(
                    conn, memory_id=mid, embedding=vector, model="hash-ngram-v1"
                )
    # Every user is heavy: their rows move into the HNSW index, as the worker does.
    await move_heavy(engine, tenant="default", user_pks=users)
    async with engine.connect() as conn:
        for user_pk in users[:5]:
            query = l2_normalize([rng.gauss(0, 1) for _ in range(512)])
            found = await memory_repo.vector_search(
                conn, user_pk=user_pk, query=query, model="hash-ngram-v1", k=10
            )
            exact = await (await driver_connection(conn)).fetch(
                memory_repo.VECTOR_EXACT, user_pk, query, "hash-ngram-v1", None, 10
            )
            assert len(found) == 10
            assert {m.id for m in found} == {r["id"] for r in exact}  # small: HNSW is exact here
            ids = (
                (
                    await conn.execute(
                        text("SELECT id FROM memories WHERE user_id = :u"), {"u": user_pk}
                    )
                )
                .scalars()
                .all()
            )
            assert {m.id for m in found} <= set(ids)

    # The read routes run on autocommit connections: the search opens a transaction of
    # its own, so the transaction-local iterative scan is in force for the HNSW query
    # and nothing is left set on the pooled connection afterwards.
    settings_seen: list[str | None] = []
    searched_at = memory_repo._searched_at

    def spying_row(r: Any, start: int, score: float | None = None) -> memory_repo.MemoryRow:
        settings_seen.append(r.get("iterative"))
        return searched_at(r, start + 1, score)  # after the column added below

    monkeypatch.setattr(
        memory_repo,
        "VECTOR_HNSW",
        memory_repo.VECTOR_HNSW.replace(
            "SELECT", "SELECT current_setting('hnsw.iterative_scan') AS iterative,", 1
        ),
    )
    monkeypatch.setattr(memory_repo, "_searched_at", spying_row)
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        query = l2_normalize([rng.gauss(0, 1) for _ in range(512)])
        found = await memory_repo.vector_search(
            conn, user_pk=users[0], query=query, model="hash-ngram-v1", k=10
        )
        assert len(found) == 10
        assert settings_seen and set(settings_seen) == {"relaxed_order"}
        assert (await conn.execute(text("SHOW enable_seqscan"))).scalar() == "on"
        assert (await conn.execute(text("SHOW hnsw.iterative_scan"))).scalar() == "off"


async def test_a_heavy_user_whose_hnsw_answer_comes_back_short_is_topped_up_exactly(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HNSW path filters by user inside the index scan and may still stop short
    (scan budget spent on other users' rows): the search then answers exactly, never
    with fewer than k. Provoked at test size by making the query's neighbourhood
    other users' rows, a scan budget of one tuple, and a planner that may only take
    the HNSW index (checked with EXPLAIN, so the test cannot pass on another plan)."""
    import random

    from app.memories.vectors import l2_normalize
    from app.stores import memories as memory_repo
    from app.stores import sessions

    monkeypatch.setattr(memory_repo, "EXACT_SCAN_MAX", 20)
    monkeypatch.setattr(memory_repo, "HNSW_EF_SEARCH", 1)
    monkeypatch.setattr(memory_repo, "HNSW_MAX_SCAN_TUPLES", 1)
    rng = random.Random(11)
    axis = [1.0] + [0.0] * 511

    def near(sign: float) -> list[float]:
        return l2_normalize([sign * a * 8 + rng.gauss(0, 0.3) for a in axis])

    async with engine.begin() as conn:
        heavy, *others = [
            await sessions.ensure_user(conn, tenant="default", user=f"h{i}") for i in range(6)
        ]
        for user_pk in [heavy, *others]:
            for j in range(30):
                mid = await memory_repo.insert_memory(
                    conn,
                    tenant="default",
                    user_pk=user_pk,
                    kind="fact",
                    text_=f"m{j}",
                    text_key=f"{user_pk}-{j}",
                    pinned=False,
                    ttl_days=None,
                    source={},
                    metadata={},
                    terms=[],
                )
                # The heavy user's rows lie opposite the query, everyone else's around it.
                vector = near(-1.0 if user_pk == heavy else 1.0)
                await memory_repo.set_embedding(
                    conn, memory_id=mid, embedding=vector, model="hash-ngram-v1"
                )
    # Every user is heavy: their rows move into the HNSW index, as the worker does.
    await move_heavy(engine, tenant="default", user_pks=[heavy, *others])
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE memories"))
    query = near(1.0)
    args = (heavy, query, "hash-ngram-v1", None, 10)
    async with engine.begin() as conn:
        db = await driver_connection(conn)
        # Only the HNSW index can order by distance now (no bitmap, no sort).
        await conn.execute(text("SET LOCAL enable_bitmapscan = off"))
        await conn.execute(text("SET LOCAL enable_sort = off"))
        await db.execute(memory_repo.HNSW_SETTINGS, "1", "1")
        plan = "\n".join(r[0] for r in await db.fetch("EXPLAIN " + memory_repo.VECTOR_HNSW, *args))
        assert "memories_embedding_hnsw_idx" in plan, plan
        short = await db.fetch(memory_repo.VECTOR_HNSW, *args)
        assert len(short) < 10  # the premise: the index path alone comes back short
        found = await memory_repo.vector_search(
            conn, user_pk=heavy, query=query, model="hash-ngram-v1", k=10
        )
        exact = await db.fetch(memory_repo.VECTOR_EXACT, *args)
    assert len(found) == 10
    assert [m.id for m in found] == [r["id"] for r in exact]


async def test_an_add_is_one_statement_with_its_embedding_job(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """For a known user: the memory, its postings and its job in one statement (run in
    autocommit: no BEGIN/COMMIT); one job waits per user; a restatement adds none."""
    await remember(client, "u-one", "Prefers aisle seats on long flights")
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE jobs SET status = 'done'"))  # the first add's job ran
    with recorded_statements(engine) as statements:
        await remember(client, "u-one", "Allergic to peanuts")
        await asyncio.sleep(0)  # the driver calls its loggers soon after each statement
    assert len(statements) == 1, statements
    assert "INSERT INTO memories" in statements[0]
    await remember(client, "u-one", "Travels with a cello")
    restated = await remember(client, "u-one", "allergic to peanuts")
    assert restated["deduplicated"] is True
    async with engine.connect() as conn:
        jobs = (
            await conn.execute(
                text(
                    "SELECT payload->>'user_pk' AS user_pk, dedup_key FROM jobs"
                    " WHERE kind = 'embed_memories' AND status = 'queued'"
                )
            )
        ).all()
        user_pk = await conn.scalar(text("SELECT id FROM users WHERE external_id = 'u-one'"))
    assert [tuple(j) for j in jobs] == [(str(user_pk), f"embed_memories:{user_pk}")]

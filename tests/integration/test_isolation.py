"""Broken object-level authorization (OWASP API1): tenant B never reaches tenant A's
objects. Every /v1 route must be listed here, so a new route cannot skip the check."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from app.stores import api_keys as keys

# (method, path template) → the path B tries on A's objects, and what B must get.
PROBES: dict[tuple[str, str], tuple[str, int]] = {
    ("POST", "/v1/sessions/{session_id}/turns"): ("/v1/sessions/sa/turns", 201),  # B's own
    ("GET", "/v1/sessions/{session_id}"): ("/v1/sessions/sa", 404),
    ("GET", "/v1/sessions/{session_id}/context"): ("/v1/sessions/sa/context", 404),
    ("GET", "/v1/sessions/{session_id}/state"): ("/v1/sessions/sa/state", 404),
    ("GET", "/v1/sessions/{session_id}/turns"): ("/v1/sessions/sa/turns", 404),
    ("DELETE", "/v1/sessions/{session_id}"): ("/v1/sessions/sa", 404),
    ("DELETE", "/v1/sessions/{session_id}/turns/last"): ("/v1/sessions/sa/turns/last", 404),
    ("POST", "/v1/sessions/{session_id}/compact"): ("/v1/sessions/sa/compact", 404),
    ("GET", "/v1/sessions/{session_id}/events"): ("/v1/sessions/sa/events", 404),
    ("GET", "/v1/sessions/{session_id}/events/{event_id}"): (
        "/v1/sessions/sa/events/{event}",
        404,
    ),
    ("POST", "/v1/users/{user_id}/memories"): ("/v1/users/ua/memories", 201),  # B's own
    ("GET", "/v1/users/{user_id}/memories"): ("/v1/users/ua/memories", 404),
    ("DELETE", "/v1/users/{user_id}/memories/{memory_id}"): (
        "/v1/users/ua/memories/{memory}",
        404,
    ),
    ("DELETE", "/v1/users/{user_id}"): ("/v1/users/ua", 404),
    ("POST", "/v1/sessions/{session_id}/misses"): ("/v1/sessions/sa/misses", 404),
    ("POST", "/v1/tasks"): ("/v1/tasks", 201),  # B's own task of the same name
    ("GET", "/v1/tasks/{task_id}"): ("/v1/tasks/ta", 404),
    ("PUT", "/v1/tasks/{task_id}/agents/{agent_name}"): ("/v1/tasks/ta/agents/x", 404),
    ("POST", "/v1/tasks/{task_id}/sessions"): ("/v1/tasks/ta/sessions", 404),
    ("GET", "/v1/tasks/{task_id}/state"): ("/v1/tasks/ta/state", 404),
    ("GET", "/v1/tasks/{task_id}/events"): ("/v1/tasks/ta/events", 404),
}


def app_of(client: httpx.AsyncClient) -> FastAPI:
    app = client._transport.app  # type: ignore[attr-defined]
    assert isinstance(app, FastAPI)
    return app


async def keys_for(client: httpx.AsyncClient, engine: AsyncEngine, *tenants: str) -> list[dict]:
    async with engine.begin() as conn:
        made = [await keys.create_key(conn, tenant=t, scope="admin") for t in tenants]
    app_of(client).state.guard.forget()
    return [{"Authorization": f"Bearer {k}"} for k in made]


async def test_every_route_refuses_another_tenants_objects(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    paths = app_of(client).openapi()["paths"]
    routes = {
        (method.upper(), path)
        for path, operations in paths.items()
        if path.startswith("/v1/")
        for method in operations
    }
    assert routes == set(PROBES), "add the new route to PROBES"

    a, b = await keys_for(client, engine, "tenant-a", "tenant-b")
    msgs = [{"role": "user", "content": f"A's secret {i}"} for i in range(10)]
    await client.post("/v1/sessions/sa/turns", json={"user_id": "ua", "messages": msgs}, headers=a)
    memory = (
        await client.post("/v1/users/ua/memories", json={"text": "A's memory"}, headers=a)
    ).json()
    task = {"task_id": "ta", "agents": [{"agent": "x", "role": "contributor"}]}
    assert (await client.post("/v1/tasks", json=task, headers=a)).status_code == 201
    attach = {"session_id": "sa", "agent": "x"}
    r = await client.post("/v1/tasks/ta/sessions", json=attach, headers=a)
    assert r.status_code == 200, r.text
    # An event of A's, written directly (no worker here).
    async with engine.begin() as conn:
        from sqlalchemy import text

        event = (
            await conn.execute(
                text(
                    "INSERT INTO compression_events (session_id, trigger, tier, state_version,"
                    " turn_ids, turn_seqs, input_tokens, output_tokens, ratio, duration_ms,"
                    " extractor, units, rendered_state, change_summary)"
                    " SELECT id, 'manual', 1, 1, '[]', '[]', 1, 1, 1, 1,"
                    " 'rules', '[]', 'A state', 'x' FROM sessions WHERE tenant_id = 'tenant-a'"
                    " RETURNING id"
                )
            )
        ).scalar_one()
    # Reads and deletes first: B's own posts then create B's objects of the same names.
    ordered = sorted(PROBES.items(), key=lambda item: item[1][1] == 201)
    for (method, _), (path, expected) in ordered:
        url = path.format(event=event, memory=memory["id"])
        body = None
        if url.endswith("/turns") and method == "POST":
            body = {"user_id": "ua", "messages": [{"role": "user", "content": "B"}]}
        if url.endswith("/memories") and method == "POST":
            body = {"text": "B's memory"}
        if url.endswith("/misses"):
            body = {"needed": "A's secret"}
        body = {
            ("POST", "/v1/tasks"): task,
            ("PUT", "/v1/tasks/ta/agents/x"): {"role": "reader"},
            ("POST", "/v1/tasks/ta/sessions"): attach,
        }.get((method, url), body)
        r = await client.request(method, url, json=body, headers=b)
        assert r.status_code == expected, (method, url, r.text)
        assert "A's" not in r.text
    # A's objects are all still there and unchanged.
    assert (await client.get("/v1/sessions/sa", headers=a)).json()["turn_count"] == 10
    texts = [
        m["text"] for m in (await client.get("/v1/users/ua/memories", headers=a)).json()["memories"]
    ]
    assert texts == ["A's memory"]
    a_task = (await client.get("/v1/tasks/ta", headers=a)).json()
    assert a_task["agents"] == [{"agent": "x", "role": "contributor", "sections": None}]
    assert a_task["sessions"] == [{"session_id": "sa", "agent": "x"}]


WORDS = ["alpha", "beta", "gamma", "delta", "花生", "过敏", "seat", "aisle", "QX7T2L", "tokyo"]
PLAN = st.lists(
    st.tuples(
        st.integers(0, 1),  # tenant
        st.integers(0, 2),  # user
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    ),
    min_size=1,
    max_size=12,
)


async def _check_isolation(db_url: str, plan: list, query: list[str]) -> None:
    from app.memories.bm25 import index_terms, search_terms
    from app.stores import memories as repo
    from app.stores import sessions
    from app.stores.engine import make_engine
    from app.wiring import create_app
    from tests.conftest import make_settings

    engine = make_engine(db_url, pool_size=2)
    app = create_app(make_settings(db_url), database_url=db_url, engine=engine)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://m") as client:
                async with engine.begin() as conn:
                    made = [
                        await keys.create_key(conn, tenant=f"t{i}", scope="agent") for i in (0, 1)
                    ]
                headers = [{"Authorization": f"Bearer {k}"} for k in made]
                run = uuid.uuid4().hex[:8]
                owned: dict[tuple[int, int], set[int]] = {}
                texts: dict[int, str] = {}
                for tenant, user, words in plan:
                    text_ = f"[{tenant}/{user}/{run}] " + " ".join(words)
                    r = await client.post(
                        f"/v1/users/u{user}-{run}/memories",
                        json={"text": text_},
                        headers=headers[tenant],
                    )
                    assert r.status_code == 201
                    owned.setdefault((tenant, user), set()).add(r.json()["id"])
                    texts[r.json()["id"]] = r.json()["text"]
                # Embeddings, as the worker would store them: the vector leg has rows.
                embedder = app.state.embedder
                async with engine.begin() as conn:
                    ids = sorted(texts)
                    vectors = await embedder.embed([texts[i] for i in ids])
                    for memory_id, vector in zip(ids, vectors, strict=True):
                        await repo.set_embedding(
                            conn, memory_id=memory_id, embedding=vector, model=embedder.model_id
                        )
                query_text = " ".join(query)
                [query_vector] = await embedder.embed([query_text])
                for tenant in (0, 1):
                    for user in range(3):
                        mine = owned.get((tenant, user), set())
                        r = await client.get(
                            f"/v1/users/u{user}-{run}/memories",
                            params={"query": query_text, "limit": 50},
                            headers=headers[tenant],
                        )
                        if not mine:
                            assert r.status_code == 404
                            continue
                        found = r.json()["memories"]
                        # Every memory of the user has a vector, so hybrid search finds
                        # all of them (at most 12, under the limit) and nothing else.
                        assert found, (tenant, user)
                        assert {m["id"] for m in found} == mine
                        for m in found:
                            assert m["text"].startswith(f"[{tenant}/{user}/{run}]"), m["text"]
                        # Each leg on its own, by the user's key.
                        async with engine.connect() as conn:
                            pk = await sessions.user_pk(
                                conn, tenant=f"t{tenant}", user=f"u{user}-{run}"
                            )
                            assert pk is not None
                            by_vector = await repo.vector_search(
                                conn, user_pk=pk, query=query_vector, model=embedder.model_id, k=50
                            )
                            terms = search_terms(query_text)
                            by_terms = await repo.lexical_search(
                                conn, user_pk=pk, terms=terms, k=50
                            )
                        assert {m.id for m in by_vector} == mine
                        sharing = {i for i in mine if set(index_terms(texts[i])) & set(terms)}
                        assert {m.id for m in by_terms} == sharing
    finally:
        await engine.dispose()


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(plan=PLAN, query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_search_never_returns_another_users_or_tenants_memory(
    db_url: str, plan: list, query: list[str]
) -> None:
    # A sync property test driving its own event loop: Hypothesis runs sync functions.
    asyncio.run(_check_isolation(db_url, plan, query))


async def test_objects_by_id_stay_out_of_reach_of_a_same_named_user(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """The attacker has its own user (and session) of the same name, so every lookup by
    name succeeds and only the id query's own owner filter stands between them."""
    a, b = await keys_for(client, engine, "tenant-a", "tenant-b")
    victim = (
        await client.post("/v1/users/u/memories", json={"text": "A's memory"}, headers=a)
    ).json()
    neighbour = (
        await client.post("/v1/users/v/memories", json={"text": "A's other user"}, headers=a)
    ).json()
    own = (
        await client.post("/v1/users/u/memories", json={"text": "B's own notebook"}, headers=b)
    ).json()
    assert len({victim["id"], neighbour["id"], own["id"]}) == 3

    # Another tenant's user "u", and another user of the same tenant: 404, nothing deleted.
    r = await client.delete(f"/v1/users/u/memories/{victim['id']}", headers=b)
    assert r.status_code == 404 and "A's" not in r.text
    r = await client.delete(f"/v1/users/v/memories/{victim['id']}", headers=a)
    assert r.status_code == 404
    r = await client.delete(f"/v1/users/u/memories/{neighbour['id']}", headers=a)
    assert r.status_code == 404
    listed = (await client.get("/v1/users/u/memories", headers=a)).json()["memories"]
    assert [m["id"] for m in listed] == [victim["id"]]
    listed = (await client.get("/v1/users/v/memories", headers=a)).json()["memories"]
    assert [m["id"] for m in listed] == [neighbour["id"]]
    # B reads and searches its own "u" only.
    for params in ({}, {"query": "notebook memory"}):
        r = await client.get("/v1/users/u/memories", params=params, headers=b)
        assert [m["text"] for m in r.json()["memories"]] == ["B's own notebook"]
    # B deletes its own memory by id; A's is still there.
    assert (await client.delete(f"/v1/users/u/memories/{own['id']}", headers=b)).status_code == 204
    listed = (await client.get("/v1/users/u/memories", headers=a)).json()["memories"]
    assert [m["id"] for m in listed] == [victim["id"]]


async def test_events_by_id_stay_out_of_reach_of_a_same_named_session(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    a, b = await keys_for(client, engine, "tenant-a", "tenant-b")
    plan = [{"role": "user", "content": f"A's plan, step {i}: never skip it."} for i in range(6)]
    body = {"user_id": "u", "messages": plan}
    assert (await client.post("/v1/sessions/s/turns", json=body, headers=a)).status_code == 201
    body = {"user_id": "u", "messages": [{"role": "user", "content": "B's plan"}]}
    assert (await client.post("/v1/sessions/s/turns", json=body, headers=b)).status_code == 201
    assert (await client.post("/v1/sessions/s2/turns", json=body, headers=a)).status_code == 201
    r = await client.post("/v1/sessions/s/compact", params={"wait": "false"}, headers=a)
    assert r.status_code == 202
    from tests.integration.test_memories import drain

    await drain(engine, str(engine.url.render_as_string(hide_password=False)))
    events = (await client.get("/v1/sessions/s/events", headers=a)).json()["events"]
    assert len(events) == 1
    event_id = events[0]["id"]
    assert (await client.get(f"/v1/sessions/s/events/{event_id}", headers=a)).status_code == 200
    r = await client.get(f"/v1/sessions/s/events/{event_id}", headers=b)
    assert r.status_code == 404 and "A's" not in r.text
    r = await client.get(f"/v1/sessions/s2/events/{event_id}", headers=a)
    assert r.status_code == 404 and "A's" not in r.text

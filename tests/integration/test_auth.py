"""API keys: required once any exists, bound to one tenant, revocable."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app.stores import api_keys as keys
from tests.conftest import post_turns


async def make_key(engine: AsyncEngine, tenant: str, scope: keys.Scope = "agent") -> str:
    async with engine.begin() as conn:
        return await keys.create_key(conn, tenant=tenant, scope=scope)


def app_of(client: httpx.AsyncClient) -> FastAPI:
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    app = transport.app
    assert isinstance(app, FastAPI)
    return app


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_open_until_the_first_key_then_required(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert (await post_turns(client, "s", [{"role": "user", "content": "x"}])).status_code == 201
    key = await make_key(engine, "acme")
    app_of(client).state.guard.forget()

    r = await client.get("/v1/sessions/s")
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.headers["content-type"].startswith("application/problem+json")
    r = await client.get("/v1/sessions/s", headers=bearer(key[:-2] + "xx"))
    assert r.status_code == 401
    r = await client.get("/v1/sessions/s", headers=bearer("not-a-key"))
    assert r.status_code == 401
    # Health and docs stay open.
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/openapi.json")).status_code == 200
    # The session was created by the open "default" tenant: acme does not see it.
    assert (await client.get("/v1/sessions/s", headers=bearer(key))).status_code == 404


async def test_tenants_never_see_each_other(client: httpx.AsyncClient, engine: AsyncEngine) -> None:
    a, b = await make_key(engine, "tenant-a"), await make_key(engine, "tenant-b")
    app_of(client).state.guard.forget()
    body = {"user_id": "u-1", "messages": [{"role": "user", "content": "secret of A"}]}
    assert (
        await client.post("/v1/sessions/shared-name/turns", json=body, headers=bearer(a))
    ).status_code == 201
    for path in ("", "/context", "/state", "/turns"):
        assert (
            await client.get(f"/v1/sessions/shared-name{path}", headers=bearer(b))
        ).status_code == 404
    assert (await client.delete("/v1/sessions/shared-name", headers=bearer(b))).status_code == 404
    # B may use the same session and user ids: they are B's own, separate rows.
    body_b = {"user_id": "u-1", "messages": [{"role": "user", "content": "B here"}]}
    r = await client.post("/v1/sessions/shared-name/turns", json=body_b, headers=bearer(b))
    assert r.status_code == 201 and r.json()["turns"][0]["seq"] == 1
    ctx_a = (await client.get("/v1/sessions/shared-name/context", headers=bearer(a))).json()
    ctx_b = (await client.get("/v1/sessions/shared-name/context", headers=bearer(b))).json()
    assert "secret of A" in ctx_a["text"] and "secret of A" not in ctx_b["text"]


async def test_revoked_key_stops_working(client: httpx.AsyncClient, engine: AsyncEngine) -> None:
    key = await make_key(engine, "acme")
    other = await make_key(engine, "acme")
    guard = app_of(client).state.guard
    guard.forget()
    assert (await post_turns(client, "s", [{"role": "user", "content": "x"}])).status_code == 401
    r = await client.post(
        "/v1/sessions/s/turns",
        json={"user_id": "u", "messages": [{"role": "user", "content": "x"}]},
        headers=bearer(key),
    )
    assert r.status_code == 201
    async with engine.begin() as conn:
        assert await keys.revoke_key(conn, key_id=key.split("_")[1])
    guard.forget()
    assert (await client.get("/v1/sessions/s", headers=bearer(key))).status_code == 401
    assert (await client.get("/v1/sessions/s", headers=bearer(other))).status_code == 200


async def test_keys_are_stored_hashed(engine: AsyncEngine) -> None:
    key = await make_key(engine, "acme", "admin")
    async with engine.connect() as conn:
        [info] = await keys.list_keys(conn)
        principal = await keys.authenticate(conn, key)
    assert info.tenant_id == "acme" and info.scope == "admin" and info.revoked_at is None
    assert key not in repr(info)
    assert principal is not None and principal.tenant_id == "acme"


async def test_revoking_the_last_key_locks_the_api_it_never_reopens(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    key = await make_key(engine, "acme", "admin")
    guard = app_of(client).state.guard
    guard.forget()
    async with engine.begin() as conn:
        assert await keys.revoke_key(conn, key_id=key.split("_")[1])
    guard.forget()
    assert (await post_turns(client, "s", [{"role": "user", "content": "x"}])).status_code == 401
    assert (await client.delete("/v1/users/u")).status_code == 401
    assert (await client.get("/v1/sessions/s", headers=bearer(key))).status_code == 401


class SteppedClock:
    """A monotonic clock the test moves by hand (the guard's cache window, without sleeping)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_revoked_key_stops_working_once_the_cache_window_has_passed(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    from app.services.auth import CACHE_TTL_S

    clock = SteppedClock()
    guard = app_of(client).state.guard
    guard.clock = clock
    # Open API, decided once and cached: a key created now is not required yet.
    assert (await post_turns(client, "s", [{"role": "user", "content": "x"}])).status_code == 201
    key = await make_key(engine, "acme")
    assert (await client.get("/v1/sessions/s")).status_code == 200  # the cached "open"
    clock.now += CACHE_TTL_S
    assert (await client.get("/v1/sessions/s")).status_code == 401  # keys now required

    assert (await client.get("/v1/sessions/s", headers=bearer(key))).status_code == 404
    async with engine.begin() as conn:
        assert await keys.revoke_key(conn, key_id=key.split("_")[1])
    # Within the documented window the cached decision stands …
    clock.now += CACHE_TTL_S / 2
    assert (await client.get("/v1/sessions/s", headers=bearer(key))).status_code == 404
    # … and once it has passed (counted from the lookup, not from the revocation) the
    # key is refused.
    clock.now += CACHE_TTL_S / 2
    r = await client.get("/v1/sessions/s", headers=bearer(key))
    assert r.status_code == 401 and "revoked" in r.json()["detail"]

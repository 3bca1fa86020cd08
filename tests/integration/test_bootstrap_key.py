"""First run: MNEMO_BOOTSTRAP_KEY becomes the first admin key, and only the first."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.stores import api_keys as keys
from tests.integration.test_auth import app_of, bearer


async def bootstrap(engine: AsyncEngine, key: str, tenant: str = "default") -> bool:
    async with engine.begin() as conn:
        return await keys.bootstrap_key(conn, key=key, tenant=tenant)


async def test_the_bootstrap_key_reaches_what_keyless_requests_made(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    posted = await client.post(
        "/v1/sessions/s-1/turns",
        json={"user_id": "u-1", "messages": [{"role": "user", "content": "hello"}]},
    )
    assert posted.status_code == 201
    key = keys.new_key()[1]
    assert await bootstrap(engine, key)
    app_of(client).state.guard.forget()

    assert (await client.get("/v1/sessions/s-1")).status_code == 401
    r = await client.get("/v1/sessions/s-1", headers=bearer(key))
    assert r.status_code == 200 and r.json()["user_id"] == "u-1"
    # An admin key: it may erase a user.
    assert (await client.delete("/v1/users/u-1", headers=bearer(key))).status_code == 204


async def test_ignored_once_any_key_ever_existed(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        first = await keys.create_key(conn, tenant="acme", scope="agent")
        await keys.revoke_key(conn, key_id=first.split("_")[1])
    assert not await bootstrap(engine, keys.new_key()[1])
    async with engine.connect() as conn:
        assert [k.tenant_id for k in await keys.list_keys(conn)] == ["acme"]


async def test_replicas_starting_together_install_it_once(engine: AsyncEngine) -> None:
    key = keys.new_key()[1]
    added = await asyncio.gather(*(bootstrap(engine, key, "ops") for _ in range(4)))
    assert sorted(added) == [False, False, False, True]
    async with engine.connect() as conn:
        installed = await keys.list_keys(conn)
        assert [(k.tenant_id, k.scope) for k in installed] == [("ops", "admin")]
        assert await keys.authenticate(conn, key) is not None


@pytest.mark.parametrize(
    ("key", "tenant"), [("not-a-key", "default"), (keys.new_key()[1], "bad tenant!")]
)
async def test_a_malformed_key_or_tenant_is_refused(
    engine: AsyncEngine, key: str, tenant: str
) -> None:
    with pytest.raises(ValueError):
        await bootstrap(engine, key, tenant)

"""`POST /compact` while compressions are queued, claimed and running: never a 5xx.

The race: the insert of a manual compression conflicts with the one already
queued, and a worker claims that one before the route looks it up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.stores import queue
from app.wiring import create_app
from tests.conftest import make_settings

SMALL_WINDOW = {
    "model_window_tokens": 1024,
    "system_prompt_tokens": 100,
    "tool_schema_tokens": 50,
    "reserved_output_tokens": 300,
}


@pytest.fixture
async def client(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The app without its worker: the test plays the worker."""
    app = create_app(make_settings(db_url, **SMALL_WINDOW), database_url=db_url, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as c:
            yield c


async def _post(client: httpx.AsyncClient, session: str, i: int) -> httpx.Response:
    message = {"role": "user", "content": f"Step {i}: the deploy target is host-{i}."}
    return await client.post(
        f"/v1/sessions/{session}/turns", json={"user_id": "u", "messages": [message]}
    )


async def _claim_queued(engine: AsyncEngine) -> list[int]:
    async with engine.begin() as conn:
        rows = await conn.execute(
            text(
                "UPDATE jobs SET status = 'running', locked_by = 'test', attempts = attempts + 1,"
                " locked_until = now() + interval '5 minutes'"
                " WHERE kind = 'compress' AND status = 'queued' RETURNING id"
            )
        )
        return [int(r.id) for r in rows]


async def test_compact_when_the_queued_job_is_claimed_under_its_feet(
    client: httpx.AsyncClient, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        assert (await _post(client, "s", i)).status_code == 201
    first = (await client.post("/v1/sessions/s/compact")).json()["job_id"]
    real = queue.enqueue
    claimed: list[int] = []

    async def enqueue_then_lose_the_race(*args: Any, **kwargs: Any) -> int | None:
        job_id = await real(*args, **kwargs)
        if job_id is None and not claimed:
            claimed.extend(await _claim_queued(engine))  # a worker was faster
        return job_id

    monkeypatch.setattr(queue, "enqueue", enqueue_then_lose_the_race)
    r = await client.post("/v1/sessions/s/compact")
    assert r.status_code == 202, r.text
    assert claimed == [first]
    # The claimed job runs what it took; a new manual one covers the turns since.
    assert r.json()["job_id"] != first
    async with engine.connect() as conn:
        payload = (
            await conn.execute(
                text("SELECT payload FROM jobs WHERE id = :id"), {"id": r.json()["job_id"]}
            )
        ).scalar_one()
    assert payload["trigger"] == "manual"


async def test_compact_never_fails_while_turns_are_posted_and_jobs_claimed(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    statuses: list[int] = []

    async def poster() -> None:
        for i in range(30):
            r = await _post(client, "busy", i)
            statuses.append(r.status_code)

    async def compactor() -> None:
        for _ in range(30):
            r = await client.post("/v1/sessions/busy/compact")
            statuses.append(r.status_code)
            await asyncio.sleep(0)

    async def worker() -> None:
        for _ in range(60):
            await _claim_queued(engine)
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE jobs SET status = 'done' WHERE status = 'running'"))
            await asyncio.sleep(0)

    await _post(client, "busy", -1)
    await asyncio.gather(poster(), compactor(), worker())
    assert statuses and all(s < 500 for s in statuses), statuses
    assert set(statuses) <= {201, 202}

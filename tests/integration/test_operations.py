"""Health, readiness, metrics and request ids."""

from __future__ import annotations

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import post_turns


async def test_readyz_checks_the_schema_version(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert (await client.get("/readyz")).json()["status"] == "ready"
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    r = await client.get("/readyz")
    assert r.status_code == 503 and "mnemo migrate" in r.json()["detail"]


async def test_metrics_count_turns_contexts_and_requests(client: httpx.AsyncClient) -> None:
    await post_turns(client, "s", [{"role": "user", "content": "hello"}] * 3)
    await client.get("/v1/sessions/s/context")
    body = (await client.get("/metrics")).text
    assert "mnemo_turns_ingested_total 3.0" in body
    assert "mnemo_context_tokens_count 1.0" in body
    assert 'route="/v1/sessions/{session_id}/turns"' in body
    assert 'mnemo_job_queue_depth{status="queued"} 1.0' in body  # episode indexing


async def test_request_id_is_echoed_or_made(client: httpx.AsyncClient) -> None:
    r = await client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = await client.get("/healthz", headers={"X-Request-ID": "bad id\n"})
    assert r.headers["x-request-id"] != "bad id\n" and len(r.headers["x-request-id"]) == 32


async def test_context_reports_the_full_history_it_replaces(client: httpx.AsyncClient) -> None:
    r = (await post_turns(client, "s", [{"role": "user", "content": "word " * 500}] * 4)).json()
    ctx = (await client.get("/v1/sessions/s/context", params={"max_tokens": 600})).json()
    assert ctx["full_history_tokens"] == r["history_tokens"] > ctx["tokens"]

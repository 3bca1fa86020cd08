"""Health, readiness, metrics and request ids."""

from __future__ import annotations

from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.metrics import Metrics, publish
from app.wiring import create_app
from tests.conftest import make_settings, post_turns


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


async def test_metrics_add_the_counters_the_job_worker_published(
    db_url: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    """`mnemo serve`'s job worker publishes its counters to a file; each scrape of the API
    adds the latest of them to its own (summed where both count), without asking the
    worker; before the worker first published, the API serves its own alone."""
    published = tmp_path / "worker.json"
    settings = make_settings(db_url, worker_metrics_file=published)
    app = create_app(settings, database_url=settings.async_database_url or "", engine=engine)
    worker = Metrics()
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as c:
            await post_turns(c, "s", [{"role": "user", "content": "hello"}] * 2)
            body = (await c.get("/metrics")).text
            assert "mnemo_turns_ingested_total 2.0" in body
            assert "mnemo_compressions_total{" not in body
            worker.compressions.labels("rules", "token_threshold").inc()
            worker.jobs.labels("compress", "done").inc()
            app.state.metrics.misses.labels("explicit", "restored").inc(2)
            worker.misses.labels("explicit", "restored").inc()
            last = publish(worker, published)
            body = (await c.get("/metrics")).text
            compressions = 'mnemo_compressions_total{extractor="rules",trigger="token_threshold"}'
            assert f"{compressions} 1.0" in body
            assert 'mnemo_jobs_total{kind="compress",outcome="done"} 1.0' in body
            assert 'mnemo_misses_total{detection="explicit",outcome="restored"} 3.0' in body
            assert "mnemo_turns_ingested_total 2.0" in body
            # The counters move with what the worker publishes next.
            worker.compressions.labels("rules", "token_threshold").inc(4)
            publish(worker, published, last=last)
            assert f"{compressions} 5.0" in (await c.get("/metrics")).text

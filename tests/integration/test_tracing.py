"""OpenTelemetry spans (MNEMO_TRACING): HTTP, database, LLM and jobs, the job's span linked
to the request that enqueued it; checked with the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core import tracing
from app.main import create_app
from app.wiring import build_worker
from tests.conftest import make_settings
from tests.integration.test_jobs import job_rows

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        yield exporter
    finally:
        tracing.disable()


def named(spans: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


async def test_request_database_job_and_llm_spans_link_up(
    db_url: str, engine: AsyncEngine, spans: InMemorySpanExporter
) -> None:
    from tests.fakes.openai_server import serve_scripted_llm, units

    with serve_scripted_llm() as llm:
        settings = make_settings(db_url, llm_base_url=llm.base_url, llm_model="tiny")
        app = create_app(settings, database_url=db_url, engine=engine)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://m") as c:
                msgs = [{"role": "user", "content": f"step {i}"} for i in range(6)]
                r = await c.post(
                    "/v1/sessions/s-1/turns",
                    json={"user_id": "u", "messages": msgs},
                    headers={"traceparent": CALLER},
                )
                assert r.status_code == 201
                r = await c.post("/v1/sessions/s-1/compact", headers={"traceparent": CALLER})
                assert r.status_code == 202
            llm.script(units({"kind": "goal", "text": "Finish the steps.", "source_seqs": [1]}))
            async with httpx.AsyncClient() as http:
                worker = build_worker(settings, engine, http=http)
                while await worker.run_once() is not None:
                    pass

    [post] = named(spans, "POST /v1/sessions/{session_id}/turns")
    assert format(post.context.trace_id, "032x") == TRACE_ID  # the caller's trace goes on
    assert post.attributes is not None and post.attributes["http.response.status_code"] == 201
    assert "s-1" not in post.name  # the template, never the id
    # Its statements are its children (the ingest transaction among them).
    children = [
        s for s in named(spans, "db ") if s.parent and s.parent.span_id == post.context.span_id
    ]
    assert {"db WITH", "db SELECT"} <= {s.name for s in children}
    # The compression job ran in a trace of its own, linked to the request that queued it.
    [compact] = named(spans, "POST /v1/sessions/{session_id}/compact")
    [job] = named(spans, "job compress")
    assert job.context.trace_id != compact.context.trace_id
    assert [link.context.span_id for link in job.links] == [compact.context.span_id]
    # The LLM call is a child of the job, with the tokens the API reported.
    [call] = named(spans, "llm chat")
    assert call.parent is not None and call.parent.span_id == job.context.span_id
    assert call.attributes is not None and call.attributes["gen_ai.request.model"] == "tiny"
    assert int(call.attributes["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
    assert any(s.context.trace_id == job.context.trace_id for s in named(spans, "db UPDATE"))


async def test_off_by_default_nothing_is_stored_with_jobs(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert not tracing.enabled()
    msgs = [{"role": "user", "content": "hello"}]
    r = await client.post(
        "/v1/sessions/s/turns",
        json={"user_id": "u", "messages": msgs},
        headers={"traceparent": CALLER},
    )
    assert r.status_code == 201
    await client.post("/v1/sessions/s/compact")
    rows = await job_rows(engine)
    assert rows and all(tracing.TRACE_KEY not in row["payload"] for row in rows)


async def test_jobs_enqueued_while_tracing_carry_the_context(
    client: httpx.AsyncClient, engine: AsyncEngine, spans: InMemorySpanExporter
) -> None:
    msgs = [{"role": "user", "content": "hello"}]
    await client.post(
        "/v1/sessions/s/turns",
        json={"user_id": "u", "messages": msgs},
        headers={"traceparent": CALLER},
    )
    rows = await job_rows(engine)
    assert rows
    for row in rows:
        assert row["payload"][tracing.TRACE_KEY]["traceparent"].split("-")[1] == TRACE_ID


async def test_one_server_span_a_request_when_the_provider_is_global(
    db_url: str, engine: AsyncEngine, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``MNEMO_TRACING`` makes its provider the global one; FastAPI's own telemetry,
    which traces whenever a global provider is configured, stays off: one server span a
    request (ours, with the route template), not two."""
    from opentelemetry import trace

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    tracing.enable(provider)
    app = create_app(make_settings(db_url), database_url=db_url, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as c:
            r = await c.post(
                "/v1/sessions/s-1/turns",
                json={"user_id": "u", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert r.status_code == 201
    server = [s for s in spans.get_finished_spans() if s.kind == trace.SpanKind.SERVER]
    assert [s.name for s in server] == ["POST /v1/sessions/{session_id}/turns"]

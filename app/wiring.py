"""Wiring: the app, the worker and their dependencies, built from settings.

``create_app`` builds the FastAPI app; its lifespan builds the engine, the auth
guard, the HTTP client, the embedder and (unless disabled) the in-process worker.
``build_worker`` builds the worker with its handlers by job kind; ``mnemo worker``
uses it alone. The handlers and services below take what they need as arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from functools import partial

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api import openapi, problems
from app.api.collector import IdleCollector
from app.api.limits import BodyLimitMiddleware
from app.api.middleware import ObservabilityMiddleware, ReplayLostReads
from app.api.routes import compression, health, memories, misses, pop, sessions, tasks
from app.api.startup import build_routes
from app.api.tracing import TracingMiddleware
from app.compression.audit import CompressionRecord
from app.compression.extract.isolated import IsolatedRuleExtractor, shared_processes
from app.compression.extract.llm import LLMExtractor
from app.core import tracing
from app.core.config import Settings, reveal
from app.core.metrics import Metrics
from app.core.tokens import encoding
from app.providers.embed import Embedder, build_embedder
from app.providers.http11 import outbound_client
from app.providers.llm import chat_client_from_settings
from app.services.auth import Guard
from app.services.compression import CompressionDeps, compress
from app.services.ingest_trigger import policy_from_settings
from app.services.jobs import Handler
from app.services.memories import check_stored_models
from app.services.memory_jobs import (
    MemoryDeps,
    embed_memories,
    index_session,
    promote,
    sweep_expired,
)
from app.services.read_units import read_units
from app.services.restamp import RestampDeps, restamp_units, start_sweep
from app.services.sessions import recount_tokens
from app.stores import queue
from app.stores.engine import make_engine
from app.stores.migrate import head_revision
from app.stores.tables import EMBEDDING_DIM
from app.ui import routes as ui
from app.worker import Worker, metrics_on_job_event


def build_handlers(
    settings: Settings,
    *,
    http: httpx.AsyncClient | None = None,
    metrics: Metrics | None = None,
    embedder: Embedder | None = None,
) -> dict[str, Handler]:
    """Handlers for every job kind; the LLM extractor only when an LLM is configured."""

    def observe_llm(outcome: str, seconds: float) -> None:
        if metrics is not None:
            metrics.llm_calls.labels(outcome).inc()
            metrics.llm_latency.observe(seconds)

    client = chat_client_from_settings(settings, http, observe_llm) if http is not None else None
    primary = LLMExtractor(client, max_retries=settings.llm_max_retries) if client else None

    def on_compressed(record: CompressionRecord) -> None:
        if metrics is None:
            return
        metrics.compressions.labels(record.extractor, record.trigger).inc()
        metrics.compression_ratio.observe(record.ratio)
        metrics.compression_duration.labels(record.extractor).observe(record.duration_ms / 1000)
        if record.fallback_reason:
            metrics.extractor_fallbacks.inc()
        if record.dropped_units:
            metrics.units_dropped.inc(record.dropped_units)
        if record.llm_prompt_tokens:
            metrics.llm_tokens.labels("prompt").inc(record.llm_prompt_tokens)
        if record.llm_completion_tokens:
            metrics.llm_tokens.labels("completion").inc(record.llm_completion_tokens)

    def on_misses(count: int) -> None:
        if metrics is not None:
            metrics.misses.labels("reask", "restored").inc(count)

    def on_restamped(count: int) -> None:
        if metrics is not None:
            metrics.units_restamped.inc(count)

    compression_deps = CompressionDeps(
        settings=settings,
        fallback=IsolatedRuleExtractor(deadline_s=settings.extraction_deadline_s),
        primary=primary,
        on_compressed=on_compressed,
        on_misses=on_misses,
        embedder=embedder,
    )
    handlers: dict[str, Handler] = {
        recount_tokens.kind: recount_tokens.bind(None),
        compress.kind: compress.bind(compression_deps),
        read_units.kind: read_units.bind(None),
        restamp_units.kind: restamp_units.bind(RestampDeps(on_restamped=on_restamped)),
    }
    if embedder is not None:
        memory = MemoryDeps(settings=settings, embedder=embedder)
        for declared in (embed_memories, index_session, promote):
            handlers[declared.kind] = declared.bind(memory)
    return handlers


def build_embedder_from_settings(settings: Settings, http: httpx.AsyncClient) -> Embedder | None:
    """The configured embedder at the dimension the schema stores; None when disabled."""
    if settings.embedder == "none":
        return None
    embedder = build_embedder(
        settings.embedder,
        http=http,
        base_url=settings.embedding_base_url,
        api_key=reveal(settings.embedding_api_key),
        model=settings.embedding_model,
        dim=EMBEDDING_DIM,
        query_cache=settings.query_cache_size,
    )
    if embedder.dim != EMBEDDING_DIM:
        raise ValueError(
            f"embedder {embedder.model_id} gives {embedder.dim}-d vectors; the memories table"
            f" stores {EMBEDDING_DIM}-d (a different dimension needs a migration)"
        )
    return embedder


def build_worker(
    settings: Settings,
    engine: AsyncEngine,
    *,
    http: httpx.AsyncClient,
    metrics: Metrics | None = None,
    embedder: Embedder | None = None,
) -> Worker:
    """A worker with every handler, the periodic memory sweep, and the restamp sweep
    queued at its start when an upgrade left stale units records."""

    async def sweep() -> None:
        deleted = await sweep_expired(engine)
        if metrics is not None and deleted:
            metrics.memories_expired.inc(deleted)

    async def prune_done() -> None:
        async with engine.begin() as conn:
            pruned = await queue.prune(
                conn, older_than_s=settings.job_retention_days * 86400, statuses=("done",)
            )
        if metrics is not None and pruned:
            metrics.jobs_pruned.inc(pruned)

    shared_processes().prestart()  # the extraction child starts now, not on a first job
    return Worker(
        engine=engine,
        handlers=build_handlers(settings, http=http, metrics=metrics, embedder=embedder),
        settings=settings,
        on_event=metrics_on_job_event(metrics) if metrics is not None else None,
        periodic=[
            (settings.memory_sweep_interval_s, sweep),
            (settings.job_prune_interval_s, prune_done),
        ],
        at_start=[partial(start_sweep, engine)],
    )


DESCRIPTION = """Memory-as-a-service for LLM agents.

Post every turn of a session; before each LLM call, get back a small, dense
context: the structured task state, relevant long-term memories and the most
recent raw turns, within a token budget. Errors are RFC 9457 problem+json.
"""


def set_aside_startup_objects() -> None:
    """Move every object alive once the app has started (modules, the app, the embedding
    model, the tokenizer) into the garbage collector's permanent generation: a full
    collection then traverses only what was allocated since. With them, each full
    collection of the API process took 120-220 ms (about 150,000 objects) and held up
    every request in flight (the 8-client context p99 of ``bench.latency``)."""
    gc.freeze()  # no collection first: it would cost as much once (garbage waits for unfreeze)


def create_app(
    settings: Settings, *, database_url: str, engine: AsyncEngine | None = None
) -> FastAPI:
    """Build the app. ``database_url`` is resolved by the caller (embedded or configured)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_engine = engine is None
        build_routes(app)  # not on the first request to each router
        app.state.engine = engine or make_engine(database_url, pool_size=settings.db_pool_size)
        tracing.instrument_engine(app.state.engine)
        app.state.guard = Guard(app.state.engine)
        stop = asyncio.Event()
        worker_task = None
        http = app.state.http = outbound_client(settings.outbound_http)
        app.state.embedder = build_embedder_from_settings(settings, http)
        if app.state.embedder is not None:
            async with app.state.engine.connect() as conn:
                await check_stored_models(conn, app.state.embedder)
        warm = getattr(app.state.embedder, "warm_up", None)
        # The model loads in the background; the first query embeds on a warm model.
        warming = asyncio.create_task(warm()) if warm is not None else None

        async def settle() -> None:
            set_aside_startup_objects()
            if warming is not None:  # and the model's, once loaded
                await warming
                set_aside_startup_objects()

        settled = asyncio.create_task(settle())
        if settings.embedded_worker:
            worker = build_worker(
                settings,
                app.state.engine,
                http=http,
                metrics=metrics,
                embedder=app.state.embedder,
            )
            worker_task = asyncio.create_task(worker.run(stop))
        collector.start()  # full collections between requests, not in their middle
        try:
            yield
        finally:
            stop.set()
            if worker_task is not None:
                await worker_task
            if warming is not None:
                await warming
            await settled
            await collector.stop()
            gc.unfreeze()  # what the app held can be collected again once it is gone
            await http.aclose()
            if own_engine:
                await app.state.engine.dispose()

    app = FastAPI(
        title="Mnemo",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        generate_unique_id_function=openapi.operation_id,
        docs_url=None,  # served by openapi.install from packaged assets, not a CDN
        redoc_url=None,
        # FastAPI's own OpenTelemetry traces whenever a global provider is set, as
        # MNEMO_TRACING sets one: TracingMiddleware makes the request's span (with the
        # route template), so FastAPI's would be a second one for every request. Off,
        # it also stops looking the providers up on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    encoding()  # load the tokenizer now, not inside the first requests
    metrics = Metrics()
    collector = IdleCollector()
    tracing.setup(settings.tracing)
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.trigger_policy = policy_from_settings(settings)  # built once, not per post
    app.state.head_revision = head_revision()
    app.add_middleware(ReplayLostReads)  # innermost: a read that lost its connection
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(ObservabilityMiddleware, metrics=metrics, collector=collector)
    app.add_middleware(TracingMiddleware)  # outermost: its span covers the whole request
    problems.install(app)
    app.include_router(health.router)
    app.include_router(sessions.router)
    app.include_router(pop.router)
    app.include_router(compression.router)
    app.include_router(memories.router)
    app.include_router(tasks.router)
    app.include_router(misses.router)
    app.include_router(ui.router)
    openapi.install(app)
    return app

"""Wiring: the job handlers by kind, the worker and the embedder, built from settings.

The app factory (``app/main.py``) and the CLI get their worker and embedder here;
the handlers and services below take what they need as arguments.
"""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.audit import CompressionRecord
from app.compression.extract.isolated import IsolatedRuleExtractor, shared_processes
from app.compression.extract.llm import LLMExtractor
from app.core.config import Settings, reveal
from app.core.metrics import Metrics
from app.providers.embed import Embedder, build_embedder
from app.providers.llm import chat_client_from_settings
from app.services.compression import CompressionDeps, compress
from app.services.jobs import Handler
from app.services.memory_jobs import (
    MemoryDeps,
    embed_memories,
    index_session,
    promote,
    sweep_expired,
)
from app.services.sessions import recount_tokens
from app.stores.tables import EMBEDDING_DIM
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

    compression = CompressionDeps(
        settings=settings,
        fallback=IsolatedRuleExtractor(deadline_s=settings.extraction_deadline_s),
        primary=primary,
        on_compressed=on_compressed,
        embedder=embedder,
    )
    handlers: dict[str, Handler] = {
        recount_tokens.kind: recount_tokens.bind(None),
        compress.kind: compress.bind(compression),
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
    """A worker with every handler and the periodic memory sweep."""

    async def sweep() -> None:
        deleted = await sweep_expired(engine)
        if metrics is not None and deleted:
            metrics.memories_expired.inc(deleted)

    shared_processes().prestart()  # the extraction child starts now, not on a first job
    return Worker(
        engine=engine,
        handlers=build_handlers(settings, http=http, metrics=metrics, embedder=embedder),
        settings=settings,
        on_event=metrics_on_job_event(metrics) if metrics is not None else None,
        periodic=[(settings.memory_sweep_interval_s, sweep)],
    )

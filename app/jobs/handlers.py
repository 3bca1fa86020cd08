"""The job kinds the worker knows, by name, wired to their dependencies."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.extract.llm import LLMExtractor
from app.compression.extract.rules import RuleExtractor
from app.compression.job import CompressionDeps, compress_handler
from app.core.config import Settings
from app.jobs.worker import Handler, JobContext
from app.observability.metrics import Metrics
from app.providers.llm import chat_client_from_settings

# recount_tokens: recompute a session's live-history counters from its turns.
RECOUNT = text("""
    UPDATE sessions s SET
        history_tokens = coalesce(
            (SELECT sum(tokens) FROM turns t WHERE t.session_id = s.id AND NOT t.compacted), 0),
        live_turns = (SELECT count(*) FROM turns t WHERE t.session_id = s.id AND NOT t.compacted)
    WHERE s.id = :sid
""")


async def recount_tokens(ctx: JobContext) -> None:
    """Repair job: the counters the trigger reads, rebuilt from the archive."""

    async def apply(conn: AsyncConnection) -> None:
        await conn.execute(RECOUNT, {"sid": ctx.job.session_id})

    await ctx.commit(apply)


def build_handlers(
    settings: Settings, *, http: httpx.AsyncClient | None = None, metrics: Metrics | None = None
) -> dict[str, Handler]:
    """Handlers for every job kind; the LLM extractor only when an LLM is configured."""
    client = chat_client_from_settings(settings, http) if http is not None else None
    primary = LLMExtractor(client, max_retries=settings.llm_max_retries) if client else None

    def on_compressed(event: dict[str, Any]) -> None:
        if metrics is None:
            return
        metrics.compressions.labels(event["extractor"], event["trigger"]).inc()
        metrics.compression_ratio.observe(event["ratio"])
        metrics.compression_duration.labels(event["extractor"]).observe(event["duration_ms"] / 1000)
        if event["fallback_reason"]:
            metrics.extractor_fallbacks.inc()

    compression = CompressionDeps(
        settings=settings, fallback=RuleExtractor(), primary=primary, on_compressed=on_compressed
    )
    return {"recount_tokens": recount_tokens, "compress": compress_handler(compression)}

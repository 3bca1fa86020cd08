"""The app factory: settings and engine in, a FastAPI app out."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api import openapi, problems
from app.api.limits import BodyLimitMiddleware
from app.api.middleware import ObservabilityMiddleware
from app.api.routes import compression, health, memories, sessions
from app.core.config import Settings
from app.core.metrics import Metrics
from app.core.tokens import encoding
from app.services.auth import Guard
from app.services.ingest_trigger import policy_from_settings
from app.services.memories import check_stored_models
from app.stores.engine import make_engine
from app.stores.migrate import head_revision
from app.wiring import build_embedder_from_settings, build_worker

log = logging.getLogger(__name__)

DESCRIPTION = """Memory-as-a-service for LLM agents.

Post every turn of a session; before each LLM call, get back a small, dense
context: the structured task state, relevant long-term memories and the most
recent raw turns, within a token budget. Errors are RFC 9457 problem+json.
"""


def create_app(
    settings: Settings, *, database_url: str, engine: AsyncEngine | None = None
) -> FastAPI:
    """Build the app. ``database_url`` is resolved by the caller (embedded or configured)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_engine = engine is None
        app.state.engine = engine or make_engine(database_url, pool_size=settings.db_pool_size)
        app.state.guard = Guard(app.state.engine)
        stop = asyncio.Event()
        worker_task = None
        http = httpx.AsyncClient()
        app.state.embedder = build_embedder_from_settings(settings, http)
        if app.state.embedder is not None:
            async with app.state.engine.connect() as conn:
                await check_stored_models(conn, app.state.embedder)
        warm = getattr(app.state.embedder, "warm_up", None)
        # The model loads in the background; the first query embeds on a warm model.
        warming = asyncio.create_task(warm()) if warm is not None else None
        if settings.embedded_worker:
            worker = build_worker(
                settings,
                app.state.engine,
                http=http,
                metrics=metrics,
                embedder=app.state.embedder,
            )
            worker_task = asyncio.create_task(worker.run(stop))
        try:
            yield
        finally:
            stop.set()
            if worker_task is not None:
                await worker_task
            if warming is not None:
                await warming
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
    )
    encoding()  # load the tokenizer now, not inside the first requests
    metrics = Metrics()
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.trigger_policy = policy_from_settings(settings)  # built once, not per post
    app.state.head_revision = head_revision()
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(ObservabilityMiddleware, metrics=metrics)
    problems.install(app)
    app.include_router(health.router)
    app.include_router(sessions.router)
    app.include_router(compression.router)
    app.include_router(memories.router)
    openapi.install(app)
    return app


def print_openapi() -> None:
    """Print the document the server serves (for docs/openapi.json)."""
    app = create_app(Settings(_env_file=None), database_url="postgresql+asyncpg://unused/x")  # type: ignore[call-arg]
    print(json.dumps(app.openapi(), indent=2, ensure_ascii=False))


if __name__ == "__main__":
    print_openapi()

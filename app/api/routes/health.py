"""Liveness and readiness."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from sqlalchemy.exc import DBAPIError

from app.api.deps import EngineDep
from app.core.metrics import (
    Metrics,
    families_of,
    merge_expositions,
    merge_families,
    set_queue_gauges,
)
from app.stores import queue
from app.stores.migrate import schema_version

log = logging.getLogger(__name__)
WORKER_METRICS_TIMEOUT_S = 2.0
router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (says nothing about the database)."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request, engine: EngineDep) -> JSONResponse:
    """The database answers and its schema is at the migration head."""
    expected = request.app.state.head_revision
    try:
        current = await schema_version(engine)
    except Exception as exc:  # any failure to reach the database means "not ready"
        return _not_ready(f"database unavailable: {type(exc).__name__}")
    if current != expected:
        return _not_ready(f"schema at {current}, expected {expected}; run `mnemo migrate`")
    return JSONResponse({"status": "ready", "schema": current})


def _not_ready(detail: str) -> JSONResponse:
    return JSONResponse(
        {
            "type": "https://mnemo.dev/problems/not-ready",
            "title": "Not ready",
            "status": 503,
            "detail": detail,
        },
        status_code=503,
        media_type="application/problem+json",
        headers={"Retry-After": "2"},
    )


@router.get("/metrics", response_class=Response)
async def metrics(request: Request, engine: EngineDep) -> Response:
    """Prometheus text format. Queue gauges are read from the database at scrape time."""
    registry: Metrics = request.app.state.metrics
    try:
        async with engine.connect() as conn:
            stats = await queue.queue_stats(conn)
        set_queue_gauges(registry, [(s.status, s.n, s.age_s) for s in stats])
    except (OSError, DBAPIError) as exc:  # the process metrics are still worth serving
        log.warning("queue gauges not refreshed: %s", exc)
    settings = request.app.state.settings
    # The job worker's counters: what it published (`mnemo serve`), or its own /metrics.
    if settings.worker_metrics_file is not None:
        body = merge_families(
            [registry.registry.collect(), _published(settings.worker_metrics_file)]
        )
    elif settings.worker_metrics_url:  # a worker's own /metrics, asked at each scrape
        body = generate_latest(registry.registry)
        try:
            worker = await request.app.state.http.get(
                settings.worker_metrics_url, timeout=WORKER_METRICS_TIMEOUT_S
            )
            worker.raise_for_status()
            body = merge_expositions([body.decode(), worker.text])
        except httpx.HTTPError as exc:
            log.warning("the job worker's metrics are missing: %s", exc)
    else:
        body = generate_latest(registry.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def _published(path: Path) -> list[Metric]:
    """The job worker's published families; none before it first published."""
    try:
        return families_of(path.read_text())
    except FileNotFoundError:
        return []

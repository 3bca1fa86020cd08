"""The API process's full collections: CPython's automatic ones are off while the app
runs (the young ones stay), one that is due runs once no request is in flight, and
CPython's thresholds are back at shutdown."""

from __future__ import annotations

import asyncio
import gc

import httpx

from app.api import collector
from app.core.config import Settings
from app.wiring import create_app


def _full() -> int:
    return int(gc.get_stats()[2]["collections"])


def _young() -> int:
    return int(gc.get_stats()[1]["collections"])


async def test_a_due_full_collection_runs_between_requests(settings: Settings) -> None:
    before = gc.get_threshold()
    app = create_app(settings, database_url=settings.async_database_url or "")
    async with app.router.lifespan_context(app):
        assert gc.get_threshold() == (before[0], before[1], collector.NEVER)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://mnemo"
        ) as c:
            young, full = _young(), _full()
            # Enough young collections for a full one to be due (none runs by itself).
            while _young() - young < before[2] + 1:
                gc.collect(1)
            assert _full() == full
            assert (await c.get("/healthz")).status_code == 200  # its end: a quiet moment
            for _ in range(100):
                if _full() > full:
                    break
                await asyncio.sleep(collector.IDLE_S)
            assert _full() == full + 1
    assert gc.get_threshold() == before


async def test_no_full_collection_while_a_request_is_in_flight() -> None:
    gc_before = gc.get_threshold()
    idle = collector.IdleCollector()
    idle.start()
    try:
        full = _full()
        idle.started()
        while _young() - idle._young_at_last < gc_before[2] + 1:
            gc.collect(1)
        idle.collect_if_due()
        assert _full() == full  # due, but a request is in flight
        idle.finished()
        await asyncio.sleep(collector.IDLE_S * 3)
        assert _full() == full + 1
    finally:
        await idle.stop()
    assert gc.get_threshold() == gc_before

"""The API's objects alive once it has started are set aside from the garbage collector
(a full collection of them stalled every request in flight), and given back at shutdown."""

from __future__ import annotations

import asyncio
import gc

import httpx

from app.core.config import Settings
from app.wiring import create_app


async def test_objects_alive_at_start_are_frozen_while_the_app_runs(settings: Settings) -> None:
    app = create_app(settings, database_url=settings.async_database_url or "")
    assert gc.get_freeze_count() == 0
    async with app.router.lifespan_context(app):
        for _ in range(100):  # set aside by a task of the lifespan, once the model is warm
            if gc.get_freeze_count():
                break
            await asyncio.sleep(0.01)
        assert gc.get_freeze_count() > 1000
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://mnemo"
        ) as c:
            assert (await c.get("/healthz")).status_code == 200
    assert gc.get_freeze_count() == 0

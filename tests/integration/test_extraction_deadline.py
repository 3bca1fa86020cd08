"""A compression whose extraction misses its deadline still succeeds, without units
from those turns and with the reason on its event; the next one extracts again."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.extract.isolated import IsolatedRuleExtractor
from app.core.config import Settings
from app.services.compression import CompressionDeps, compress
from app.worker import Worker
from tests.conftest import post_turns
from tests.fakes.extractors import RUNAWAY


async def _compress(
    engine: AsyncEngine, settings: Settings, extractor: IsolatedRuleExtractor
) -> None:
    """Run the queued jobs with only this compression handler (others are buried)."""
    deps = CompressionDeps(settings=settings, fallback=extractor)
    worker = Worker(engine=engine, handlers={compress.kind: compress.bind(deps)}, settings=settings)
    while await worker.run_once() is not None:
        pass


async def _event(client: httpx.AsyncClient, event_id: int) -> dict:
    r = await client.get(f"/v1/sessions/s-deadline/events/{event_id}")
    assert r.status_code == 200, r.text
    event: dict = r.json()
    return event


async def _post(client: httpx.AsyncClient, first: int, count: int) -> None:
    messages = [
        {
            "role": "user",
            "content": f"Never book flights that land after 22:00 (note {i}).",
            "id": f"m{i}",
        }
        for i in range(first, first + count)
    ]
    assert (await post_turns(client, "s-deadline", messages)).status_code == 201


async def test_extraction_past_its_deadline_compacts_without_units_and_says_why(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    await _post(client, 0, 6)
    assert (await client.post("/v1/sessions/s-deadline/compact")).status_code == 202
    runaway = IsolatedRuleExtractor(deadline_s=0.5, target=RUNAWAY)
    await _compress(engine, settings, runaway)

    events = (await client.get("/v1/sessions/s-deadline/events")).json()["events"]
    assert len(events) == 1
    event = await _event(client, events[0]["id"])
    assert event["units"] == [] and event["turn_seqs"] == [1, 2, 3]
    assert "0.5 s deadline" in event["fallback_reason"]
    assert "no units from turns 1–3" in event["fallback_reason"]
    session = (await client.get("/v1/sessions/s-deadline")).json()
    assert session["state_version"] == 1

    # The session is not stuck: the next compression extracts as usual.
    await _post(client, 6, 4)
    assert (await client.post("/v1/sessions/s-deadline/compact")).status_code == 202
    healthy = IsolatedRuleExtractor(deadline_s=settings.extraction_deadline_s)
    await _compress(engine, settings, healthy)
    events = (await client.get("/v1/sessions/s-deadline/events")).json()["events"]
    assert len(events) == 2 and events[0]["fallback_reason"] is None
    latest = await _event(client, events[0]["id"])
    assert any(u["kind"] == "constraint" for u in latest["units"])

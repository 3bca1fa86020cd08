"""The context read fits the task state beside the working window: the largest of
the renderings stored at compression time that fits, never the window cut for it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.tokens import count_tokens
from app.wiring import create_app
from tests.conftest import make_settings


@pytest.fixture
async def live(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(db_url, embedded_worker=True, embedder="none")
    app = create_app(settings, database_url=db_url, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as c:
            yield c


def _lookup(i: int) -> list[dict[str, Any]]:
    call = {
        "id": f"look{i}",
        "type": "function",
        "function": {"name": "get_order_details", "arguments": json.dumps({"order": f"A{i:03d}"})},
    }
    result = {
        "order": f"A{i:03d}",
        "lines": [{"sku": f"SKU-{i}-{k}", "qty": k, "note": "standard shipping"} for k in range(8)],
        "status": "delivered",
        "carrier": "parcel express",
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call], "id": f"c{i}"},
        {"role": "tool", "tool_call_id": f"look{i}", "content": json.dumps(result), "id": f"r{i}"},
    ]


def session() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "I want to return a lamp from one of my orders.", "id": "u0"},
        {"role": "user", "content": "Never refund to the old card ending 1180.", "id": "u1"},
    ]
    for i in range(12):
        messages += _lookup(i)
    refund = {
        "id": "w1",
        "type": "function",
        "function": {"name": "create_return", "arguments": json.dumps({"order_id": "A007"})},
    }
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [refund], "id": "cw"},
        {
            "role": "tool",
            "tool_call_id": "w1",
            "content": json.dumps({"return_id": "RET-5521", "status": "created"}),
            "id": "rw",
        },
        {"role": "assistant", "content": "Return RET-5521 is created for order A007.", "id": "a1"},
        {"role": "user", "content": "Great, and what about the shipping label?", "id": "u2"},
        {"role": "assistant", "content": "It will arrive by email within the hour.", "id": "a2"},
        {"role": "user", "content": "Perfect, print it for me when it comes.", "id": "u3"},
    ]
    return messages


async def test_a_small_budget_gets_a_smaller_rendering_and_keeps_the_window(
    live: httpx.AsyncClient,
) -> None:
    r = await live.post("/v1/sessions/s/turns", json={"user_id": "u", "messages": session()})
    assert r.status_code == 201
    r = await live.post("/v1/sessions/s/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    stored = (await live.get("/v1/sessions/s/state")).json()
    tiers = [stored["rendered"], *stored["state"]["renderings"]]
    assert len(tiers) >= 2
    sizes = [count_tokens(t) for t in tiers]
    assert sizes == sorted(sizes, reverse=True)
    # Every rendering keeps the rule and the write with its id.
    assert all("1180" in t and "RET-5521" in t for t in tiers)
    window = ["It will arrive by email within the hour.", "Perfect, print it for me when it comes."]
    for budget in (2500, sizes[0] + 60, sizes[-1] + 60):
        ctx = (await live.get("/v1/sessions/s/context", params={"max_tokens": budget})).json()
        assert ctx["tokens"] <= budget
        system = ctx["messages"][0]["content"]
        # A stored rendering, whole; with the change notice as its last line if it fits.
        assert system in tiers or system.rpartition("\n")[0] in tiers, system
        contents = [m["content"] for m in ctx["messages"][1:]]
        assert all(w in contents for w in window), (budget, contents)
    small = (await live.get("/v1/sessions/s/context", params={"max_tokens": sizes[-1] + 60})).json()
    assert small["messages"][0]["content"] != tiers[0]

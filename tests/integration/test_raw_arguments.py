"""Tool-call arguments that are not JSON: models sometimes write them (truncated,
unquoted, hostile), and an agent must be able to post the assistant message it got.
They are stored verbatim, compaction reads them as raw text without failing, and the
archive and /context give them back exactly as posted (real Postgres, real worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.test_change_notice import with_worker

# Each is a string a model could emit in place of JSON arguments.
RAW = {
    "truncated": '{"city": "Lis',
    "unquoted": "{city: Lisbon}",
    "prose": "search for flights to Lisbon",
    "deep": "[" * 50_000 + "]" * 50_000,  # valid JSON past any parser's stack
    "nested": "[" * 100 + "]" * 100,  # valid JSON, deeper than metadata may be
    "escaped_nul": '{"path": "a\\u0000b"}',  # JSON whose value holds U+0000
    "huge_number": '{"n": 1e999, "m": NaN}',  # Python's json reads inf and nan
}


@pytest.fixture
async def live(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    async for c in with_worker(db_url, engine):
        yield c


def call(call_id: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "search", "arguments": arguments},
    }


async def post(client: httpx.AsyncClient, *messages: dict[str, Any]) -> httpx.Response:
    r = await client.post("/v1/sessions/s-raw/turns", json={"user_id": "u-1", "messages": messages})
    assert r.status_code == 201, r.text[:500]
    return r


def calls_in(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {
        c["id"]: c["function"]["arguments"] for m in messages for c in m.get("tool_calls") or ()
    }


async def test_arguments_that_are_not_json_round_trip_through_compaction_and_context(
    live: httpx.AsyncClient,
) -> None:
    await post(
        live,
        {"role": "user", "content": "Find me a flight to Lisbon next Tuesday."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call(name, raw) for name, raw in RAW.items()],
        },
        *({"role": "tool", "tool_call_id": name, "content": "no results"} for name in RAW),
        {"role": "assistant", "content": "I found nothing yet; shall I widen the dates?"},
        {"role": "user", "content": "Yes, widen by two days."},
        {"role": "assistant", "content": "Widening the search now."},
        {"role": "user", "content": "Thanks."},
    )
    r = await live.post("/v1/sessions/s-raw/compact", params={"wait": "true"})
    assert r.status_code == 200, r.text[:500]
    assert r.json()["status"] == "compressed"

    # The compaction recorded each call; non-JSON text is kept as raw text.
    state = (await live.get("/v1/sessions/s-raw/state")).json()["state"]
    actions = {a["call_id"]: a for a in state["actions"]}
    assert set(RAW) <= set(actions), sorted(actions)
    assert actions["truncated"]["arguments"] == {"_raw": RAW["truncated"]}
    assert actions["prose"]["arguments"] == {"_raw": RAW["prose"]}
    assert "\x00" not in str(actions["escaped_nul"]["arguments"])

    # The archive gives every call back as posted, compacted or not.
    turns = (await live.get("/v1/sessions/s-raw/turns")).json()["turns"]
    assert turns[1]["compacted"] is True
    assert calls_in(turns) == RAW

    # A call posted after the compaction comes back from /context, verbatim, in Chat
    # Completions form; posted as a Responses item it is stored the same way.
    await post(
        live,
        {"role": "assistant", "content": None, "tool_calls": [call("late", RAW["unquoted"])]},
        {"role": "tool", "tool_call_id": "late", "content": "3 flights"},
        {"type": "function_call", "call_id": "item", "name": "search", "arguments": "{oops"},
        {"type": "function_call_output", "call_id": "item", "output": "none"},
    )
    r = await live.get("/v1/sessions/s-raw/context", params={"max_tokens": 4000})
    assert r.status_code == 200, r.text[:500]
    shown = calls_in(r.json()["messages"])
    assert shown == {"late": RAW["unquoted"], "item": "{oops"}

"""GET /v1/sessions/{id}/context: budgeted, tool groups whole, state first."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.tokens import count_messages_tokens
from tests.conftest import post_turns


def call(call_id: str, name: str = "search", args: str = '{"q": "x"}') -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def tool_round(i: int, payload: str = "result") -> list[dict]:
    return [
        {"role": "assistant", "content": None, "tool_calls": [call(f"c{i}a"), call(f"c{i}b")]},
        {"role": "tool", "tool_call_id": f"c{i}a", "content": f"{payload} a {i}"},
        {"role": "tool", "tool_call_id": f"c{i}b", "content": f"{payload} b {i}"},
    ]


def assert_tool_groups_whole(messages: list[dict]) -> None:
    open_ids: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, f"orphan tool result {m}"
            open_ids.discard(m["tool_call_id"])
        else:
            assert not open_ids, f"tool results missing for {open_ids}"
            open_ids = {c["id"] for c in m.get("tool_calls") or ()}
    assert not open_ids


@pytest.mark.parametrize("budget", [64, 100, 150, 333, 1000, 5000])
async def test_context_within_budget_newest_first(client: httpx.AsyncClient, budget: int) -> None:
    msgs: list[dict] = []
    for i in range(30):
        msgs.append({"role": "user", "content": f"question {i}: " + "lorem ipsum " * (i % 7)})
        msgs.extend(tool_round(i, "data " * (i % 5)))
        msgs.append({"role": "assistant", "content": f"answer {i}"})
    await post_turns(client, "s", msgs)
    ctx = (await client.get("/v1/sessions/s/context", params={"max_tokens": budget})).json()
    assert ctx["tokens"] <= budget == ctx["max_tokens"]
    assert ctx["tokens"] == count_messages_tokens(ctx["messages"])
    assert_tool_groups_whole(ctx["messages"])
    if ctx["messages"]:
        assert ctx["messages"][-1]["content"] == "answer 29"
    # Newest first with no holes: the contents form a suffix of what was posted.
    tail = [m.get("content") for m in msgs[-len(ctx["messages"]) :]] if ctx["messages"] else []
    assert [m.get("content") for m in ctx["messages"]] == tail
    assert sum(b["tokens"] for b in ctx["blocks"]) == ctx["tokens"] - (
        0 if not ctx["messages"] or ctx["messages"][0]["role"] != "system" else 4
    )


async def test_context_of_whole_small_session(client: httpx.AsyncClient) -> None:
    msgs = [
        {"role": "user", "content": "hello"},
        *tool_round(1),
        {"role": "assistant", "content": "done"},
    ]
    await post_turns(client, "s", msgs, user="u-42")
    ctx = (await client.get("/v1/sessions/s/context")).json()
    assert ctx["user_id"] == "u-42" and ctx["state_version"] == 0
    assert len(ctx["messages"]) == 5
    assert ctx["blocks"] == [{"kind": "recent", "tokens": ctx["tokens"]}]
    assert "search" in ctx["text"] and "done" in ctx["text"]


async def test_oversized_newest_message_is_trimmed_not_dropped(client: httpx.AsyncClient) -> None:
    await post_turns(client, "s", [{"role": "user", "content": "word " * 3000}])
    ctx = (await client.get("/v1/sessions/s/context", params={"max_tokens": 200})).json()
    assert ctx["tokens"] <= 200
    assert ctx["messages"][0]["content"].endswith("[truncated]")


async def test_rendered_state_comes_first_and_compacted_turns_never_twice(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    msgs = [{"role": "user", "content": f"old turn {i}"} for i in range(5)]
    msgs += [{"role": "user", "content": f"new turn {i}"} for i in range(3)]
    await post_turns(client, "s", msgs)
    async with engine.begin() as conn:
        sid = (await conn.execute(text("SELECT id FROM sessions"))).scalar_one()
        await conn.execute(
            text(
                "INSERT INTO task_states (session_id, version, state, rendered, rendered_tokens)"
                " VALUES (:sid, 3, '{}', 'Goal: test the context.', 6)"
            ),
            {"sid": sid},
        )
        await conn.execute(
            text("UPDATE turns SET compacted = true WHERE session_id = :sid AND seq <= 5"),
            {"sid": sid},
        )
    ctx = (await client.get("/v1/sessions/s/context")).json()
    assert ctx["state_version"] == 3
    assert ctx["messages"][0] == {"role": "system", "content": "Goal: test the context."}
    assert [m["content"] for m in ctx["messages"][1:]] == [f"new turn {i}" for i in range(3)]
    assert "old turn" not in ctx["text"]
    assert [b["kind"] for b in ctx["blocks"]] == ["task_state", "recent"]
    state = (await client.get("/v1/sessions/s/state")).json()
    assert state["version"] == 3


async def test_orphan_tool_result_is_left_out(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await post_turns(
        client,
        "s",
        [{"role": "user", "content": "go"}, *tool_round(1), {"role": "assistant", "content": "ok"}],
    )
    async with engine.begin() as conn:
        # The call is compacted, its results are not: they must not appear alone.
        await conn.execute(text("UPDATE turns SET compacted = true WHERE seq <= 2"))
    ctx = (await client.get("/v1/sessions/s/context")).json()
    assert [m["role"] for m in ctx["messages"]] == ["assistant"]
    assert_tool_groups_whole(ctx["messages"])

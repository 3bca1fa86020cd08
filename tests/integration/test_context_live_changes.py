"""A value the user changed after the last compression is never shown as current in
its old form, whatever the budget: ingest → compact → more turns → /context."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import post_turns
from tests.integration.test_change_notice import with_worker


@pytest.fixture
async def live(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    async for c in with_worker(db_url, engine, embedder="none"):
        yield c


def _msg(i: str, role: str, content: str) -> dict[str, Any]:
    return {"id": i, "role": role, "content": content}


OPENING = [
    _msg("u1", "user", "We need to migrate the billing database to the new cluster."),
    _msg("u2", "user", "Set the maintenance window to Sunday 02:00."),
    _msg("a2", "assistant", "Noted."),
    _msg("u3", "user", "The replica count should be 3."),
    _msg("a3", "assistant", "Understood."),
    _msg("u4", "user", "Keep the old cluster read-only until we sign off."),
    _msg("a4", "assistant", "Will do."),
]
# A long reply: a few of them push older live turns out of a small context.
REPORT = (
    "Here is the pre-flight report for the migration. "
    + "Table orders_2024 checked, row counts match, indexes rebuilt, vacuum done. " * 12
)


async def _compacted_then(
    live: httpx.AsyncClient, later: list[dict[str, Any]], opening: list[dict[str, Any]] = OPENING
) -> str:
    """The rendered state after compacting ``opening``; then ``later`` is posted live."""
    assert (await post_turns(live, "s", opening)).status_code == 201
    r = await live.post("/v1/sessions/s/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    assert (await post_turns(live, "s", later)).status_code == 201
    rendered: str = (await live.get("/v1/sessions/s/state")).json()["rendered"]
    return rendered


def _state_of(ctx: dict[str, Any]) -> str:
    system = ctx["messages"][0]
    assert system["role"] == "system"
    content: str = system["content"]
    return content


def _live_contents(ctx: dict[str, Any]) -> list[str]:
    return [m["content"] for m in ctx["messages"][1:]]


async def test_a_change_whose_turn_is_left_out_still_reaches_the_state(
    live: httpx.AsyncClient,
) -> None:
    change = "Let's move the maintenance window to Saturday 23:00."
    later = [
        _msg("u5", "user", change),
        _msg("a5", "assistant", "Sure."),
        *[_msg(f"r{i}", "assistant", REPORT) for i in range(4)],
        _msg("u6", "user", "Thanks, what is next?"),
    ]
    rendered = await _compacted_then(live, later)
    assert "- maintenance window: Sunday 02:00" in rendered  # the state predates the change
    for budget in (700, 1200, 4000):
        ctx = (await live.get("/v1/sessions/s/context", params={"max_tokens": budget})).json()
        assert ctx["tokens"] <= budget
        state = _state_of(ctx)
        assert "- maintenance window: Saturday 23:00 (was Sunday 02:00)" in state, (budget, state)
        # The other values stand as they were.
        assert "- replica count: 3\n" in state + "\n"
        if budget == 700:
            assert change not in _live_contents(ctx)  # the turn itself was left out


async def test_the_newest_of_several_live_changes_wins_in_chinese(
    live: httpx.AsyncClient,
) -> None:
    opening = [
        _msg("u1", "user", "我需要给一位顾客办理退款。"),
        _msg("u2", "user", "退款金额设为 300 元。"),
        _msg("a2", "assistant", "好的。"),
        _msg("u3", "user", "回复顾客时必须使用正式的语气。"),
        _msg("a3", "assistant", "明白。"),
        _msg("u4", "user", "先查一下订单状态。"),
    ]
    later = [
        _msg("u5", "user", "退款金额改成 450 元吧。"),
        _msg("a5", "assistant", "好的，已记下。"),
        _msg("u6", "user", "退款金额从 450 元调整到 520 元。"),
        _msg("a6", "assistant", "明白。"),
    ]
    await _compacted_then(live, later, opening)
    ctx = (await live.get("/v1/sessions/s/context", params={"max_tokens": 2000})).json()
    state = _state_of(ctx)
    assert "- 退款金额：520 元 (原为 300 元)" in state, state
    assert "：450 元" not in state


async def test_a_change_older_than_the_turns_read_for_packing(live: httpx.AsyncClient) -> None:
    # More live turns than the context read fetches for packing (its first page).
    later = [_msg("u5", "user", "Bump the replica count to 5.")]
    later += [_msg(f"x{i}", "user" if i % 2 else "assistant", f"ok {i}") for i in range(80)]
    await _compacted_then(live, later)
    ctx = (await live.get("/v1/sessions/s/context", params={"max_tokens": 600})).json()
    assert "- replica count: 5 (was 3)" in _state_of(ctx)


async def test_a_state_without_that_parameter_is_left_as_rendered(
    live: httpx.AsyncClient,
) -> None:
    later = [_msg("u5", "user", "Set the batch size to 500."), _msg("a5", "assistant", "OK.")]
    rendered = await _compacted_then(live, later)
    ctx = (await live.get("/v1/sessions/s/context", params={"max_tokens": 4000})).json()
    # A new value is not stale: its turn says it; the state is the stored rendering.
    assert _state_of(ctx).split("\n\n")[0] in (rendered, *rendered.split("\nSince"))
    assert "batch size" not in _state_of(ctx)


async def test_the_next_compression_renders_the_change_itself(live: httpx.AsyncClient) -> None:
    later = [
        _msg("u5", "user", "Bump the replica count to 5."),
        _msg("a5", "assistant", "Done."),
        _msg("u6", "user", "Good."),
        _msg("a6", "assistant", "Next I will copy the schema."),
        _msg("u7", "user", "Fine."),
        _msg("a7", "assistant", "Copying now."),
    ]
    await _compacted_then(live, later)
    r = await live.post("/v1/sessions/s/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    ctx = (await live.get("/v1/sessions/s/context", params={"max_tokens": 4000})).json()
    state = _state_of(ctx)
    assert "through turn 10" in state  # the change is compressed now, not live
    assert state.count("- replica count: 5 (was 3)") == 1, state

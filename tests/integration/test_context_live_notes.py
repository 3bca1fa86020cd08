"""What a live user turn adds (a rule, a pinned fact, a next step) reaches the context
even when the packer leaves the turn out, and a question the state shows as pending
that the first live reply answered is not shown as open: ingest → compact → more
turns → /context, against real Postgres."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import post_turns
from tests.integration.test_context_live_changes import (
    OPENING,
    REPORT,
    _compacted_then,
    _live_contents,
    _msg,
    _state_of,
    live,
)

__all__ = ["live"]  # the fixture, shared


async def _context(client: httpx.AsyncClient, budget: int) -> dict[str, Any]:
    ctx: dict[str, Any] = (
        await client.get("/v1/sessions/s/context", params={"max_tokens": budget})
    ).json()
    assert ctx["tokens"] <= budget
    return ctx


async def test_a_rule_said_in_a_left_out_turn_is_in_the_state(live: httpx.AsyncClient) -> None:
    rule = "Never restart the primary during the migration."
    later = [
        _msg("u5", "user", rule),
        _msg("a5", "assistant", "Understood."),
        *[_msg(f"r{i}", "assistant", REPORT) for i in range(4)],
        _msg("u6", "user", "Thanks, what is next?"),
    ]
    rendered = await _compacted_then(live, later)
    assert rule not in rendered  # the state predates the rule
    small = await _context(live, 700)
    assert rule not in _live_contents(small)  # the turn itself was left out
    assert f"- {rule}" in _state_of(small).split("\n"), _state_of(small)
    # A context that holds the turn does not also repeat it in the state.
    large = await _context(live, 4000)
    assert rule in _live_contents(large)
    assert f"- {rule}" not in _state_of(large).split("\n")
    # The next compression renders it once, as the overlay showed it.
    r = await live.post("/v1/sessions/s/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    after = _state_of(await _context(live, 700))
    assert after.split("\n").count(f"- {rule}") == 1, after


async def test_pinned_facts_and_next_steps_in_chinese(live: httpx.AsyncClient) -> None:
    opening = [
        _msg("u1", "user", "我要给团队组织一次年终聚餐。"),
        _msg("u2", "user", "人数设为 12 人。"),
        _msg("a2", "assistant", "好的。"),
        _msg("u3", "user", "预算每人不超过 200 元。"),
        _msg("a3", "assistant", "明白。"),
    ]
    report = "这是候选餐厅的详细对比，包括位置、菜单、包间和停车情况。" * 20
    later = [
        _msg("u4", "user", "我的员工号是 E-448213。"),
        _msg("a4", "assistant", "已记录。"),
        _msg("u5", "user", "接下来还需要通知财务部门预留发票。"),
        _msg("a5", "assistant", "好的。"),
        *[_msg(f"r{i}", "assistant", report) for i in range(3)],
        _msg("u6", "user", "谢谢，下一步呢？"),
    ]
    await _compacted_then(live, later, opening)
    ctx = await _context(live, 800)
    state = _state_of(ctx)
    assert not any("E-448213" in c for c in _live_contents(ctx))
    assert any("E-448213" in line for line in state.split("\n")), state
    assert any("通知财务部门" in line for line in state.split("\n")), state


async def test_a_question_the_first_live_reply_answered_is_not_pending(
    live: httpx.AsyncClient,
) -> None:
    question = "Shall I switch the traffic to the new cluster now?"
    opening = [
        *OPENING,
        _msg("a9", "assistant", f"The replicas are in sync. {question}"),
        # The working window: these stay live after the compression.
        _msg("u10", "user", "Yes, go ahead."),
        _msg("a10", "assistant", "Switching now."),
        _msg("u11", "user", "Tell me when it is done."),
    ]
    assert (await post_turns(live, "s", opening)).status_code == 201
    r = await live.post("/v1/sessions/s/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    rendered = (await live.get("/v1/sessions/s/state")).json()["rendered"]
    assert f"Pending: {question}" in rendered.split("\n"), rendered
    later = [*[_msg(f"r{i}", "assistant", REPORT) for i in range(4)], _msg("u12", "user", "OK.")]
    assert (await post_turns(live, "s", later)).status_code == 201
    for budget in (700, 4000):
        ctx = await _context(live, budget)
        state = _state_of(ctx)
        assert f"Pending: {question}" not in state.split("\n"), (budget, state)
        if budget == 700:
            assert "Yes, go ahead." not in _live_contents(ctx)
            assert f"- Answered: {question} → Yes, go ahead." in state.split("\n"), state

"""What the live turns do to the task state shows at once, whatever the budget, as the
next compression will show it: a rule the state holds that a live turn withdrew, a
question the user moved past twice, and, in a session never compressed, the rules
and next steps of live turns the packer leaves out. Ingest → compact → more turns →
/context, against real Postgres."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import post_turns
from tests.integration.test_context_live_changes import (
    REPORT,
    _compacted_then,
    _live_contents,
    _msg,
    _state_of,
    live,
)
from tests.integration.test_context_live_notes import _context

__all__ = ["live"]  # the fixture, shared


def _section(state: str, header: str) -> list[str]:
    lines = state.split("\n")
    if header not in lines:
        return []
    out = []
    for line in lines[lines.index(header) + 1 :]:
        if not line.startswith("- "):
            break
        out.append(line)
    return out


async def _compact(client: httpx.AsyncClient) -> str:
    r = await client.post("/v1/sessions/s/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    rendered: str = (await client.get("/v1/sessions/s/state")).json()["rendered"]
    return rendered


RULES_EN = [
    _msg("u1", "user", "Please book flights from Boston to Denver for the sales conference."),
    _msg("u2", "user", "The budget limit is 900 dollars for the whole trip."),
    _msg("a2", "assistant", "Noted."),
    _msg("u3", "user", "Never book red-eye flights."),
    _msg("a3", "assistant", "Understood."),
    _msg("u4", "user", "Prefer nonstop flights where possible."),
    _msg("a4", "assistant", "Will do."),
]
RULES_ZH = [
    _msg("u1", "user", "帮我订从上海到成都的机票，参加下个月的行业峰会。"),
    _msg("u2", "user", "预算不能超过 3000 元。"),
    _msg("a2", "assistant", "好的。"),
    _msg("u3", "user", "不要订红眼航班。"),
    _msg("a3", "assistant", "明白。"),
    _msg("u4", "user", "尽量选直飞航班。"),
    _msg("a4", "assistant", "好的。"),
]


async def _withdrawn_live(
    client: httpx.AsyncClient,
    opening: list[dict[str, Any]],
    said: str,
    rule: str,
    headers: tuple[str, str],
) -> None:
    constraints, revoked = headers
    later = [
        _msg("u5", "user", said),
        _msg("a5", "assistant", "OK."),
        *[_msg(f"r{i}", "assistant", REPORT) for i in range(4)],
        _msg("u6", "user", "Thanks, what is next?"),
    ]
    rendered = await _compacted_then(client, later, opening)
    assert rule in _section(rendered, constraints), rendered  # the state predates it
    for budget in (700, 4000):
        state = _state_of(await _context(client, budget))
        assert rule not in _section(state, constraints), (budget, state)
        if budget == 4000:
            assert rule in _section(state, revoked), state
            overlaid = state
    # The next compression shows it as the overlay did.
    after = _state_of(await _context(client, 4000)) if await _compact(client) else ""
    for header in headers:
        assert _section(after, header) == _section(overlaid, header), (after, overlaid)


async def test_a_rule_withdrawn_live_stops_showing_at_once(live: httpx.AsyncClient) -> None:
    await _withdrawn_live(
        live,
        RULES_EN,
        "Actually, forget the budget limit.",
        "- The budget limit is 900 dollars for the whole trip.",
        ("Constraints (must follow):", "No longer applies:"),
    )


async def test_a_rule_withdrawn_live_in_chinese(live: httpx.AsyncClient) -> None:
    await _withdrawn_live(
        live,
        RULES_ZH,
        "不用管预算了。",
        "- 预算不能超过 3000 元。",
        ("约束（必须遵守）：", "已撤销（不再适用）："),
    )


async def test_a_question_moved_past_twice_is_not_pending(live: httpx.AsyncClient) -> None:
    question = "Would you like me to check the catering options of those venues?"
    opening = [
        _msg("u1", "user", "Please plan the team offsite in Lisbon for twelve people."),
        _msg("u2", "user", "The budget is 5000 euros."),
        _msg("a2", "assistant", "Noted."),
        _msg("u3", "user", "Find venues near the river."),
        _msg("a3", "assistant", f"I found three venues near the river. {question}"),
        # The working window: these stay live after the compression.
        _msg("u4", "user", "Also book flights for everyone from Berlin."),
        _msg("a4", "assistant", "Looking for flights now."),
        _msg("a4b", "assistant", "There are direct flights every morning."),
    ]
    assert (await post_turns(live, "s", opening)).status_code == 201
    rendered = await _compact(live)
    assert f"Pending: {question}" in rendered.split("\n"), rendered
    # One reply moved past it: it is still awaited.
    state = _state_of(await _context(live, 4000))
    assert f"Pending: {question}" in state.split("\n"), state
    later = [
        _msg("u5", "user", "And find a hotel close to the venue for three nights."),
        _msg("a5", "assistant", "Sure."),
        *[_msg(f"r{i}", "assistant", REPORT) for i in range(4)],
    ]
    assert (await post_turns(live, "s", later)).status_code == 201
    for budget in (700, 4000):
        state = _state_of(await _context(live, budget))
        assert f"Pending: {question}" not in state.split("\n"), (budget, state)
        assert question not in state, state  # nor shown as answered
    after = await _compact(live)
    assert question not in after, after


async def test_a_session_never_compressed_keeps_its_left_out_rules(
    live: httpx.AsyncClient,
) -> None:
    rule = "Never restart the primary database during business hours."
    step = "Next, we still need to notify the finance team."
    turns = [
        _msg("u1", "user", "We need to migrate the billing database to the new cluster."),
        _msg("a1", "assistant", "Sure."),
        _msg("u2", "user", rule),
        _msg("a2", "assistant", "Understood."),
        _msg("u3", "user", step),
        _msg("a3", "assistant", "Noted."),
        *[_msg(f"r{i}", "assistant", REPORT) for i in range(4)],
        _msg("u4", "user", "Thanks, what is next?"),
    ]
    assert (await post_turns(live, "s", turns)).status_code == 201
    assert (await live.get("/v1/sessions/s/state")).json()["rendered"] == ""
    small = await _context(live, 700)
    assert rule not in _live_contents(small)  # the turns themselves were left out
    state = _state_of(small)
    assert f"- {rule}" in _section(state, "Constraints (must follow):"), state
    assert any("notify the finance team" in line for line in _section(state, "Next steps:"))
    # A context that holds the turns adds no state of its own.
    large = await _context(live, 4000)
    assert rule in _live_contents(large)
    assert large["messages"][0]["role"] != "system" or rule not in large["messages"][0]["content"]
    # The compression renders them as the notes did.
    rendered = await _compact(live)
    for header in ("Constraints (must follow):", "Next steps:"):
        assert set(_section(state, header)) <= set(_section(rendered, header)), rendered


async def test_a_session_never_compressed_in_chinese(live: httpx.AsyncClient) -> None:
    report = "这是候选餐厅的详细对比，包括位置、菜单、包间和停车情况。" * 20
    turns = [
        _msg("u1", "user", "我要给团队组织一次年终聚餐。"),
        _msg("a1", "assistant", "好的。"),
        _msg("u2", "user", "我的员工号是 E-448213。"),
        _msg("a2", "assistant", "已记录。"),
        _msg("u3", "user", "千万不要选有辣菜的餐厅。"),
        _msg("a3", "assistant", "明白。"),
        *[_msg(f"r{i}", "assistant", report) for i in range(3)],
        _msg("u4", "user", "谢谢，下一步呢？"),
    ]
    assert (await post_turns(live, "s", turns)).status_code == 201
    ctx = await _context(live, 800)
    state = _state_of(ctx)
    assert not any("E-448213" in c for c in _live_contents(ctx))
    assert state.startswith("## 任务状态"), state
    assert any("E-448213" in line for line in _section(state, "重要信息（始终适用）：")), state
    assert any("辣" in line for line in _section(state, "约束（必须遵守）：")), state

"""The context read turns only the turns packing can reach into messages: same result."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.context.pack import (
    Block,
    Groups,
    RecentTurn,
    first_placed,
    pack,
    system_message,
    window_tokens,
)
from app.core.tokens import count_message_tokens, count_tokens
from app.services.context import Row, reachable
from app.stores.context import ROLE, TOKENS

# A turn as the context read returns it; "orphan" is a tool result whose call is not
# in view (compacted), which packing skips without spending budget on it.
ITEM = st.one_of(
    st.tuples(st.sampled_from(["user", "assistant"]), st.text(max_size=300)),
    st.tuples(st.just("tools"), st.integers(1, 3), st.text(max_size=400)),
    st.tuples(st.just("orphan"), st.text(max_size=600)),
)


def rows_of(spec: list[tuple[Any, ...]]) -> list[Row]:
    """Oldest first, as the context read returns turns (``stores.context.TURN``), with
    their stored token counts."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(spec):
        if item[0] == "tools":
            ids = [f"c{i}-{k}" for k in range(item[1])]
            calls = [
                {"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for c in ids
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages.extend({"role": "tool", "tool_call_id": c, "content": item[2]} for c in ids)
        elif item[0] == "orphan":
            messages.append({"role": "tool", "tool_call_id": f"gone-{i}", "content": item[1]})
        else:
            messages.append({"role": item[0], "content": item[1]})
    return [
        (
            seq,
            m["role"],
            m["content"],
            m.get("tool_calls"),
            m.get("tool_call_id"),
            None,
            count_message_tokens(m),
            None,
        )
        for seq, m in enumerate(messages, start=1)
    ]


def recent(rows: list[Row]) -> list[RecentTurn]:
    return [
        RecentTurn(
            message={
                k: v
                for k, v in zip(
                    ("role", "content", "tool_calls", "tool_call_id"), r[1:5], strict=True
                )
                if v is not None or k == "content"
            },
            tokens=r[TOKENS],
        )
        for r in rows
    ]


@settings(max_examples=300, deadline=None)
@given(
    spec=st.lists(ITEM, max_size=40),
    state=st.text(max_size=600),
    budget=st.integers(min_value=64, max_value=1500),
    window=st.integers(1, 4),
)
def test_packing_the_reachable_turns_gives_the_same_context(
    spec: list[tuple[Any, ...]], state: str, budget: int, window: int
) -> None:
    rows = rows_of(spec)
    newest_first = rows[::-1]
    cut = reachable(newest_first, budget)
    assert cut == newest_first[: len(cut)]
    everything, reached = recent(rows), recent(cut[::-1])
    blocks = [Block("task_state", state)]
    full = pack(blocks=blocks, recent=everything, max_tokens=budget, count=count_tokens)
    short = pack(blocks=blocks, recent=reached, max_tokens=budget, count=count_tokens)
    assert (short.messages, short.blocks, short.tokens) == (full.messages, full.blocks, full.tokens)
    assert window_tokens(reached, window, budget) == window_tokens(everything, window, budget)


def test_a_long_session_is_cut_after_the_head_that_fills_the_budget() -> None:
    rows = rows_of([("user", "word " * 40)] * 30 + [("tools", 2, "result " * 30)])
    cut = reachable(rows[::-1], 300)
    assert 3 < len(cut) < len(rows)
    assert cut[-1][ROLE] != "tool"  # a group's head: the group stays whole


@settings(max_examples=300, deadline=None)
@given(
    spec=st.lists(ITEM, max_size=40),
    states=st.lists(st.text(max_size=600), max_size=3),
    budget=st.integers(min_value=64, max_value=1500),
)
def test_the_turns_placed_are_those_from_first_placed_on(
    spec: list[tuple[Any, ...]], states: list[str], budget: int
) -> None:
    """The live notes ask which turns a packing leaves out by ``first_placed`` alone:
    it must name what ``pack(cut=False)`` places, and a packing given the groups and
    the system message it settled on must be the packing without them."""
    turns = recent(rows_of(spec))
    blocks = [Block(f"block-{i}", s) for i, s in enumerate(states)]
    groups, system = Groups.of(turns), system_message(blocks, budget, count_tokens)
    trial = pack(blocks=blocks, recent=turns, max_tokens=budget, count=count_tokens, cut=False)
    placed = {id(m) for m in trial.messages[1 if system.blocks else 0 :]}
    first = first_placed(system, groups, budget)
    orphans = {
        id(t.message)
        for g, orphan in zip(groups.groups, groups.orphan, strict=True)
        if orphan
        for t in g
    }
    assert placed == {id(t.message) for t in turns[first:] if id(t.message) not in orphans}
    given_all = pack(
        blocks=blocks,
        recent=turns,
        max_tokens=budget,
        count=count_tokens,
        grouped=groups,
        system=system,
    )
    alone = pack(blocks=blocks, recent=turns, max_tokens=budget, count=count_tokens)
    assert (given_all.messages, given_all.blocks, given_all.tokens) == (
        alone.messages,
        alone.blocks,
        alone.tokens,
    )

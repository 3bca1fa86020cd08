"""Context packing invariants, by example and by property."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.context.pack import TRUNCATION_MARK, Block, RecentTurn, group_turns, pack
from app.core.tokens import count_message_tokens, count_messages_tokens, count_tokens


def turn(message: dict) -> RecentTurn:
    return RecentTurn(message=message, tokens=count_message_tokens(message))


def user(text: str) -> RecentTurn:
    return turn({"role": "user", "content": text})


def calls(*ids: str) -> RecentTurn:
    return turn(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for i in ids
            ],
        }
    )


def result(call_id: str, text: str = "ok") -> RecentTurn:
    return turn({"role": "tool", "tool_call_id": call_id, "content": text})


def test_groups_keep_calls_with_their_results() -> None:
    turns = [user("a"), calls("1", "2"), result("1"), result("2"), user("b"), result("9")]
    sizes = [len(g) for g in group_turns(turns)]
    assert sizes == [1, 3, 1, 1]


def test_blocks_go_first_in_one_system_message() -> None:
    packed = pack(
        blocks=[Block("task_state", "Goal: x"), Block("summary", "Earlier: y")],
        recent=[user("hi")],
        max_tokens=500,
        count=count_tokens,
    )
    assert packed.messages[0]["role"] == "system"
    assert packed.messages[0]["content"] == "Goal: x\n\nEarlier: y"
    assert [k for k, _ in packed.blocks] == ["task_state", "summary", "recent"]


def test_empty_blocks_are_skipped() -> None:
    packed = pack(
        blocks=[Block("task_state", "")], recent=[user("hi")], max_tokens=100, count=count_tokens
    )
    assert [m["role"] for m in packed.messages] == ["user"]


def test_oversized_state_is_truncated_to_fit() -> None:
    packed = pack(
        blocks=[Block("task_state", "constraint " * 1000)],
        recent=[],
        max_tokens=100,
        count=count_tokens,
    )
    assert packed.tokens <= 100
    assert packed.messages[0]["content"].endswith("[truncated]")


def test_a_tool_group_that_does_not_fit_is_cut_or_left_out_whole() -> None:
    recent = [user("first"), calls("1"), result("1", "x " * 500), user("last")]
    # Room enough: the call stays whole, its result cut; nothing older comes in.
    packed = pack(blocks=[], recent=recent, max_tokens=60, count=count_tokens)
    assert [m["role"] for m in packed.messages] == ["assistant", "tool", "user"]
    assert packed.messages[1]["content"].endswith(TRUNCATION_MARK) and packed.tokens <= 60
    assert packed.dropped_turns == 1
    # No room for a useful piece of the result: the group is left out whole.
    packed = pack(blocks=[], recent=recent, max_tokens=30, count=count_tokens)
    assert [m["content"] for m in packed.messages] == ["last"]
    assert packed.dropped_turns == 3


MESSAGE = st.one_of(
    st.builds(lambda t: ("user", t), st.text(max_size=300)),
    st.builds(lambda t: ("assistant", t), st.text(max_size=300)),
    st.builds(lambda n, t: ("tools", n, t), st.integers(1, 3), st.text(max_size=400)),
)


@settings(max_examples=150, deadline=None)
@given(
    spec=st.lists(MESSAGE, max_size=25),
    state=st.text(max_size=800),
    budget=st.integers(min_value=20, max_value=1500),
)
def test_pack_never_exceeds_budget_and_never_splits_tools(
    spec: list, state: str, budget: int
) -> None:
    recent: list[RecentTurn] = []
    for i, item in enumerate(spec):
        if item[0] == "tools":
            ids = [f"c{i}-{k}" for k in range(item[1])]
            recent.append(calls(*ids))
            recent.extend(result(c, item[2]) for c in ids)
        else:
            recent.append(turn({"role": item[0], "content": item[1]}))
    packed = pack(
        blocks=[Block("task_state", state)], recent=recent, max_tokens=budget, count=count_tokens
    )
    assert packed.tokens <= budget
    assert count_messages_tokens(packed.messages) == packed.tokens
    open_ids: set[str] = set()
    for m in packed.messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids
            open_ids.discard(m["tool_call_id"])
        else:
            assert not open_ids
            open_ids = {c["id"] for c in m.get("tool_calls") or ()}
    assert not open_ids


def test_an_oversized_newest_tool_result_is_cut_not_dropped() -> None:
    recent = [
        user("find flights"),
        calls("1", "2"),
        result("1", "row " * 3000),
        result("2", "small"),
    ]
    packed = pack(
        blocks=[Block("task_state", "Goal: x")], recent=recent, max_tokens=400, count=count_tokens
    )
    roles = [m["role"] for m in packed.messages]
    assert roles == ["system", "assistant", "tool", "tool"]
    assert packed.messages[2]["content"].endswith("[truncated]")
    assert packed.messages[3]["content"] == "small"
    assert packed.tokens <= 400


def test_choose_tier_takes_the_largest_rendering_that_fits() -> None:
    from app.context.pack import choose_tier

    block = Block("task_state", "full " * 100, tiers=("medium " * 30, "minimal"))
    assert choose_tier(block, 1000, count_tokens).text == block.text
    assert choose_tier(block, 50, count_tokens).text == "medium " * 30
    assert choose_tier(block, 5, count_tokens).text == "minimal"
    assert choose_tier(block, 0, count_tokens).text == "minimal"  # pack cuts it


def test_window_tokens_counts_the_newest_groups() -> None:
    from app.context.pack import window_tokens

    recent = [user(f"message {i}") for i in range(6)]
    one = recent[-1].tokens
    assert window_tokens(recent, 3, 10_000) == 3 * one
    assert window_tokens(recent, 10, 10_000) == 6 * one
    assert window_tokens(recent, 3, one) == one

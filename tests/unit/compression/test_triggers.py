"""Trigger decisions and tiered turn selection, as tables."""

from __future__ import annotations

from typing import Any

import pytest

from app.compression.merge import merge
from app.compression.state import ActionUnit, TaskState, TodoUnit
from app.compression.triggers import (
    Trigger,
    decide_trigger,
    history_budget,
    select_turns,
    tier_for,
)
from app.core.turns import TurnView

from .helpers import assistant, call, result, user


@pytest.mark.parametrize(
    ("window", "system", "tools", "reserved", "expected"),
    [
        (128_000, 2_000, 3_000, 4_000, 119_000),
        (8_192, 1_000, 0, 1_024, 6_168),
        (1_000, 900, 200, 100, 0),
    ],
)
def test_history_budget(window: int, system: int, tools: int, reserved: int, expected: int) -> None:
    assert history_budget(window, system, tools, reserved) == expected


def _decide(**overrides: Any) -> Trigger | None:
    args: dict[str, Any] = {
        "history_tokens": 1_000,
        "history_budget": 10_000,
        "uncompacted_turns": 20,
        "total_turns": 20,
        "recent": (),
    }
    args.update(overrides)
    return decide_trigger(**args)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({}, None),
        ({"history_tokens": 8_001}, "token_threshold"),
        ({"history_tokens": 8_000}, None),  # strictly greater than ratio × budget
        ({"history_tokens": 6_001, "trigger_ratio": 0.6}, "token_threshold"),
        ({"history_tokens": 9_000, "total_turns": 7}, None),  # before min_turns
        ({"history_tokens": 9_000, "total_turns": 7, "min_turns": 4}, "token_threshold"),
        ({"history_tokens": 9_000, "uncompacted_turns": 3}, None),  # only the working window
        ({"manual": True, "total_turns": 1, "uncompacted_turns": 1}, "manual"),
        ({"manual": True, "history_tokens": 9_000}, "manual"),
    ],
)
def test_static_triggers(overrides: dict[str, Any], reason: str | None) -> None:
    trigger = _decide(**overrides)
    assert (trigger.reason if trigger else None) == reason


def _failing_calls(n: int, start: int = 0) -> list[TurnView]:
    turns = []
    for i in range(n):
        turns += [
            call(start + 2 * i, f"f{i}", "fetch", {"page": i}),
            result(start + 2 * i + 1, f"f{i}", {"error": "503"}),
        ]
    return turns


@pytest.mark.parametrize(
    ("recent", "reason"),
    [
        (_failing_calls(3), "tool_failures"),
        (_failing_calls(2), None),
        (
            [*_failing_calls(3), call(6, "ok", "fetch", {"page": 9}), result(7, "ok", {"a": 1})],
            None,
        ),
        (
            [
                call(0, "a", "search", {"q": "x", "n": 1}),
                result(1, "a", []),
                call(2, "b", "search", {"n": 1, "q": "x"}),
                result(3, "b", []),
            ],
            "repeated_action",
        ),
        (
            [
                call(0, "a", "search", {"q": "x"}),
                result(1, "a", []),
                call(2, "b", "search", {"q": "y"}),
                result(3, "b", []),
            ],
            None,
        ),
        ([user(0, "Done, thanks!")], "milestone"),
        ([user(0, "完成了，下一个任务")], "milestone"),
        ([user(0, "That's all for the flights.")], "milestone"),
        ([assistant(0, "All steps are completed.")], "milestone"),
        ([user(0, "ok")], None),
        ([user(0, "Which one is done faster?")], None),
    ],
)
def test_dynamic_triggers(recent: list[TurnView], reason: str | None) -> None:
    trigger = _decide(recent=recent)
    assert (trigger.reason if trigger else None) == reason


def test_dynamic_triggers_respect_min_turns() -> None:
    assert _decide(recent=_failing_calls(3), total_turns=5) is None


def test_repeat_of_an_action_already_in_the_ledger() -> None:
    state = merge(
        TaskState(),
        [
            ActionUnit(
                tool="book_flight",
                arguments={"flight": "TP204"},
                status="done",
                call_id="c1",
                source_seqs=[1, 2],
            )
        ],
    )
    again = [call(30, "c9", "book_flight", {"flight": "TP204"})]
    trigger = _decide(recent=again, state=state)
    assert trigger is not None and trigger.reason == "repeated_action"
    # The same call that is already recorded is not a repeat of itself.
    assert _decide(recent=[call(1, "c1", "book_flight", {"flight": "TP204"})], state=state) is None


def test_todo_completed_by_tool_is_a_milestone() -> None:
    state = merge(TaskState(), [TodoUnit(text="search hotels in Kyoto", source_seqs=[3])])
    recent = [call(10, "h", "search_hotels", {"city": "Kyoto"}), result(11, "h", [{"id": 1}])]
    trigger = _decide(recent=recent, state=state)
    assert trigger is not None and trigger.reason == "milestone"
    failed = [call(10, "h", "search_hotels", {"city": "Kyoto"}), result(11, "h", {"error": "x"})]
    assert _decide(recent=failed, state=state) is None


def test_topic_drift_only_with_similarity() -> None:
    recent = [
        user(0, "Plan a trip to Kyoto in April."),
        user(1, "Now write me a sonnet about databases."),
    ]
    assert _decide(recent=recent) is None
    drift = _decide(recent=recent, similarity=lambda a, b: 0.1)
    assert drift is not None and drift.reason == "topic_drift"
    assert _decide(recent=recent, similarity=lambda a, b: 0.9) is None


def test_token_threshold_wins_over_dynamic_triggers() -> None:
    trigger = _decide(history_tokens=9_500, recent=_failing_calls(3))
    assert trigger is not None and trigger.reason == "token_threshold"


# --------------------------------------------------------------------------- tiers


def _chat(n: int) -> list[TurnView]:
    return [user(i, f"message {i}") if i % 2 == 0 else assistant(i, f"reply {i}") for i in range(n)]


@pytest.mark.parametrize(
    ("n", "compressions_done", "expected"),
    [
        (20, 0, 6),  # tier 1: ceil(30% of 20)
        (20, 1, 10),  # tier 2: 50%
        (20, 2, 17),  # tier 3: all but the last 3
        (20, 7, 17),
        (10, 0, 3),
        (4, 2, 1),
        (3, 0, 0),  # only the working window
        (0, 0, 0),
        (5, 1, 2),  # ceil(2.5) = 3, capped by the window at 2
    ],
)
def test_tiers(n: int, compressions_done: int, expected: int) -> None:
    turns = _chat(n)
    selected = select_turns(turns, compressions_done=compressions_done)
    assert [t.seq for t in selected] == list(range(expected))


@pytest.mark.parametrize(("done", "tier"), [(0, 1), (1, 2), (2, 3), (9, 3)])
def test_tier_for(done: int, tier: int) -> None:
    assert tier_for(done) == tier


def test_cut_is_extended_to_include_tool_results() -> None:
    turns = [
        user(0, "go"),
        user(1, "now"),
        call(2, "a", "x", {}),
        result(3, "a", "ok"),
        *_chat(8)[4:],
    ]
    # Tier 1 wants ceil(30% of 8) = 3 turns; the third is a call, so its result comes too.
    assert [t.seq for t in select_turns(turns, compressions_done=0)] == [0, 1, 2, 3]


def test_parallel_calls_are_one_block() -> None:
    multi = TurnView(
        seq=1,
        role="assistant",
        content=None,
        tool_calls=[
            {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "y", "arguments": "{}"}},
        ],
    )
    turns = [user(0, "go"), multi, result(2, "a", "1"), result(3, "b", "2"), *_chat(12)[4:]]
    selected = select_turns(turns, compressions_done=0)  # ceil(3.6) = 4 → exactly the block end
    assert [t.seq for t in selected] == [0, 1, 2, 3]
    assert [t.seq for t in select_turns(turns, compressions_done=0)][-1] != 1


def test_never_takes_from_the_working_window_or_splits_a_call_across_it() -> None:
    turns = [*_chat(6), call(6, "a", "x", {}), result(7, "a", "ok"), assistant(8, "done")]
    # Tier 3 wants all but the last 3 (seq 6..8); the call at 6 must not be split from
    # its result at 7, so the cut is before the call.
    assert [t.seq for t in select_turns(turns, compressions_done=5)] == [0, 1, 2, 3, 4, 5]
    turns = [*_chat(5), call(5, "a", "x", {}), result(6, "a", "ok"), *_chat(12)[7:]]
    selected = select_turns(turns, compressions_done=5)
    assert selected[-1].seq == 8 and all(t.seq < 9 for t in selected)


def test_selection_never_ends_on_an_unanswered_call_boundary() -> None:
    turns = [
        user(0, "go"),
        call(1, "a", "x", {}),
        result(2, "a", "ok"),
        call(3, "b", "y", {}),
        result(4, "b", "ok"),
        *_chat(12)[5:],
    ]
    for done in range(4):
        selected = select_turns(turns, compressions_done=done)
        ids = {c["id"] for t in selected for c in t.tool_calls or ()}
        answered = {t.tool_call_id for t in selected if t.role == "tool"}
        assert ids == answered

"""A setting said with what it replaces ("make the X B instead of A"), and a question
that weighs a value ("should we raise X to B?", "要不要把X改成B？"): the first changes
the value to B alone, the second proposes and changes nothing. The compressor and the
read-time overlay (compression/live.py) read both the same way."""

from __future__ import annotations

import pytest

from app.compression.extract.changes import value_change
from app.compression.live import LiveTurn, apply_changes, live_changes
from app.compression.merge import merge
from app.compression.render import render
from app.compression.state import ParameterUnit, PendingUnit, TaskState
from app.core.turns import TurnView
from tests.unit.compression.helpers import assistant, extract, user

EN_OPENING = [
    user(1, "We are migrating the billing database to the new cluster."),
    user(2, "Set the batch size to 500."),
    assistant(3, "Noted."),
    user(4, "The retry limit should be 3."),
    assistant(5, "OK."),
]
ZH_OPENING = [
    user(1, "我们要把账单数据库迁移到新集群。"),
    user(2, "批大小设为 500。"),
    assistant(3, "好的。"),
    user(4, "重试次数改成 3 次。"),
    assistant(5, "明白。"),
]


def _state(turns: list[TurnView]) -> TaskState:
    return merge(TaskState(), extract(turns), through_seq=turns[-1].seq)


def _said(opening: list[TurnView], text: str) -> list[ParameterUnit]:
    units = extract([user(6, text)], _state(opening))
    return [u for u in units if isinstance(u, ParameterUnit)]


def _overlaid(opening: list[TurnView], text: str) -> str:
    before = render(_state(opening))
    return apply_changes(before, live_changes(before, [LiveTurn(6, "user", text)]))


INSTEAD = [
    ("Actually make the batch size 800 instead of 500.", "batch size", "800", "500"),
    ("Please set the batch size to 750 rather than 500.", "batch size", "750", "500"),
    ("Make the retry limit 5, not 3.", "retry limit", "5", "3"),
    ("Hmm, keep the retry limit at 4 instead of 3.", "retry limit", "4", "3"),
    ("Let's go with 900 rather than 500.", "batch size", "900", "500"),
]


@pytest.mark.parametrize(("text", "name", "new", "old"), INSTEAD)
def test_b_instead_of_a_sets_b_alone(text: str, name: str, new: str, old: str) -> None:
    found = _said(EN_OPENING, text)
    assert [(p.name, p.value, p.previous) for p in found] == [(name, new, old)], found
    # The overlay shows what the next compression renders.
    assert f"- {name}: {new} (was {old})" in _overlaid(EN_OPENING, text).split("\n")
    assert f"- {name}: {new} (was {old})" in render(_state([*EN_OPENING, user(6, text)])).split(
        "\n"
    )


def test_the_lead_words_of_a_setting_are_not_its_new_value() -> None:
    change = value_change("Actually make the shard count 12 instead of 8.")
    assert change is not None
    assert (change.name, change.old, change.new) == ("shard count", "8", "12")
    change = value_change("Set the page size to 40 rather than 25, please.")
    assert change is not None and (change.old, change.new) == ("25", "40")


PROPOSALS = [
    (EN_OPENING, "Should we raise the batch size to 1000?"),
    (EN_OPENING, "What if we set the retry limit to 6?"),
    (EN_OPENING, "How about we lower the batch size to 200?"),
    (EN_OPENING, "Do you think we should bump the retry limit to 5?"),
    (EN_OPENING, "Should we move the batch size from 500 to 700?"),
    (ZH_OPENING, "要不要把批大小改成 1000？"),
    (ZH_OPENING, "重试次数调到 5 次怎么样？"),
    (ZH_OPENING, "把批大小改成 800，好不好？"),
    (ZH_OPENING, "批大小要不要从 500 调整到 700？"),
    (ZH_OPENING, "是不是应该把重试次数改成 6 次？"),
]


@pytest.mark.parametrize(("opening", "text"), PROPOSALS)
def test_a_question_about_a_value_proposes_and_sets_nothing(
    opening: list[TurnView], text: str
) -> None:
    units = extract([user(6, text)], _state(opening))
    assert not [u for u in units if isinstance(u, ParameterUnit)], units
    # At most an open proposal, in the user's words.
    assert [u.text for u in units if isinstance(u, PendingUnit)] == [text]
    before = render(_state(opening))
    assert live_changes(before, [LiveTurn(6, "user", text)]) == []
    after = render(_state([*opening, user(6, text)]))
    params = [line for line in after.split("\n") if "1000" in line or "700" in line]
    assert all(not line.startswith("- ") or "?" in line or "？" in line for line in params)


REQUESTS = [
    (EN_OPENING, "Can you raise the batch size to 1000?", "batch size", "1000"),
    (EN_OPENING, "Could you set the retry limit to 6?", "retry limit", "6"),
    (ZH_OPENING, "批大小改成 1000 吧。", "批大小", "1000"),
]


@pytest.mark.parametrize(("opening", "text", "name", "value"), REQUESTS)
def test_a_request_phrased_as_a_question_still_sets_the_value(
    opening: list[TurnView], text: str, name: str, value: str
) -> None:
    found = _said(opening, text)
    assert [(p.name, p.value) for p in found] == [(name, value)]
    assert live_changes(render(_state(opening)), [LiveTurn(6, "user", text)])


def test_a_proposal_weighing_a_swap_changes_no_choice() -> None:
    opening = [
        user(1, "We need a hosting plan for the launch."),
        user(2, "Let's compare Nimbus and Stratus."),
        assistant(3, "Sure."),
    ]
    for text in ("Should we skip Nimbus and go with Stratus?", "要不要不选Nimbus了，换Stratus？"):
        units = extract([user(4, text)], _state(opening))
        assert not [u for u in units if u.kind in ("decision", "revocation")], (text, units)


# "B instead of A" asked, not said: it names the setting it weighs, so it is kept open.
INSTEAD_PROPOSALS = [
    (EN_OPENING, "Should we make the batch size 800 instead of 500?"),
    (EN_OPENING, "What if we keep the retry limit at 5 rather than 3?"),
    (EN_OPENING, "Would it make sense to set the batch size to 750, not 500?"),
    (ZH_OPENING, "要不要把批大小改成 800，而不是 500？"),
    (ZH_OPENING, "是不是把重试次数调到 5 次，不再是 3 次？"),
]


@pytest.mark.parametrize(("opening", "text"), INSTEAD_PROPOSALS)
def test_a_proposed_b_instead_of_a_is_pending_and_sets_nothing(
    opening: list[TurnView], text: str
) -> None:
    units = extract([user(6, text)], _state(opening))
    assert not [u for u in units if u.kind in ("parameter", "decision")], units
    assert [u.text for u in units if isinstance(u, PendingUnit)] == [text], units
    before = render(_state(opening))
    assert live_changes(before, [LiveTurn(6, "user", text)]) == []
    after = render(_state([*opening, user(6, text)]))
    pending = "Pending: " if opening is EN_OPENING else "待确认："
    assert f"{pending}{text}" in after.split("\n"), after
    # The values stand as they were.
    assert set(before.split("\n")[1:]) <= set(after.split("\n")), (before, after)

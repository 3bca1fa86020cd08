"""Changes of mind: value changes and reversed choices (our own variants)."""

from __future__ import annotations

import pytest

from app.compression.extract.changes import Change, change_units, reversal, value_change
from app.compression.extract.context import Context, Ref
from tests.unit.compression.helpers import extract, of_kind, user

VALUE_CHANGES = [
    ("The deadline moved from May 2 to May 9.", Change("deadline", "May 2", "May 9")),
    ("Quick fix: the seat count is now 12, not 10.", Change("seat count", "10", "12")),
    (
        "About the deposit: I said $300, but it's actually $340.",
        Change(None, "$300", "$340"),
    ),
    ("Head count: 40 → 55.", Change("Head count", "40", "55")),
    ("I need the room rate lowered — $180 rather than $210.", Change("room rate", "$210", "$180")),
    ("装修预算从 8000 调整到 9500。", Change("装修预算", "8000", "9500")),
    ("参会人数不是30了，改成45。", Change("参会人数", "30", "45")),
    ("交房日期以6月3日为准，别再按5月30日了。", Change(None, "5月30日", "6月3日")),
    ("复诊时间调成周四吧，周二不合适。", Change("复诊时间", "周二", "周四")),
    ("OK, flip that: Acme, not Zenith.", Change(None, "Zenith", "Acme")),
    # the new value asked for, the old one turned down after it
    (
        "Bump the guest count to 60, please — 48 won't be enough.",
        Change("guest count", "48", "60"),
    ),
    (
        "Could you move the pickup time to 7:30? 6:45 doesn't suit us after all.",
        Change("pickup time", "6:45", "7:30"),
    ),
    ("Set the tile colour to slate; sand no longer works.", Change("tile colour", "sand", "slate")),
    # one choice traded for another
    ("Can we swap eu-south2 out for eu-central1?", Change(None, "eu-south2", "eu-central1")),
    ("Please replace the oak finish with walnut.", Change(None, "oak finish", "walnut")),
]

REVERSALS = [
    ("On second thought, not the Hilton — the Marriott instead.", "Hilton", "Marriott"),
    ("Skip Acme this time and go with Zenith.", "Acme", "Zenith"),
    ("Bluebird is a bad idea. Make it Redwood.", "Bluebird", "Redwood"),
    ("I take back what I said about Python 2. Let's do Python 3.", "Python 2", "Python 3"),
    ("我改主意了，不要南湖那套了，换东湖那套。", "南湖那套", "东湖那套"),
    ("王医生不考虑了，直接上刘医生。", "王医生", "刘医生"),
    ("蓝色那款pass，走灰色那款。", "蓝色那款", "灰色那款"),
    ("Honestly, the Rexall beats the Walgreens. Go with that one.", "Walgreens", "Rexall"),
    ("I was wrong about the Hilton. Switch it to the Westin, please.", "Hilton", "Westin"),
    ("Never mind Orion — Vega it is.", "Orion", "Vega"),
    ("换个思路，不选东湖了，西湖更合适。", "东湖", "西湖"),
    ("哎，两次还是算了吧，就五次往返。", "两次", "五次往返"),
    ("我反悔了，木屋比帐篷更合适，就定木屋。", "帐篷", "木屋"),
]

NOT_CHANGES = [
    "Please do not book red-eye flights.",
    "We're open from 9 to 5 on weekdays.",
    "I'm not sure about the colour yet.",
    "Book the train from Leeds to York.",
    "我们从北京到上海坐高铁。",
    "不要用我的旧邮箱。",
    "Thanks, that works!",
    "Should we swap the oak finish for walnut?",
    "I wonder if we could trade Tuesday for Thursday.",
]


@pytest.mark.parametrize(("text", "expected"), VALUE_CHANGES)
def test_value_changes(text: str, expected: Change) -> None:
    found = value_change(text)
    assert found is not None
    assert (found.old, found.new) == (expected.old, expected.new)
    if expected.name is not None:
        assert found.name == expected.name


@pytest.mark.parametrize(("text", "old", "new"), REVERSALS)
def test_reversals(text: str, old: str, new: str) -> None:
    found = reversal(text)
    assert found is not None and (found.old, found.new) == (old, new)


@pytest.mark.parametrize("text", NOT_CHANGES)
def test_rules_requests_and_spans_are_not_changes(text: str) -> None:
    assert value_change(text) is None and reversal(text) is None


def test_a_named_change_is_a_parameter_with_its_previous_value() -> None:
    ctx = Context(goal_set=True)
    [unit] = change_units("The deadline moved from May 2 to May 9.", 4, ctx, "en")
    assert unit.kind == "parameter"
    assert (unit.name, unit.value, unit.previous) == ("deadline", "May 9", "May 2")


@pytest.mark.parametrize(
    ("language", "text", "note"),
    [
        ("en", "Skip Acme this time and go with Zenith.", "Zenith instead of Acme"),
        ("zh", "王医生不考虑了，直接上刘医生。", "改为刘医生（不再是王医生）"),
    ],
)
def test_a_reversal_is_a_decision_and_withdraws_the_old_choice(
    language: str, text: str, note: str
) -> None:
    old = "Acme" if language == "en" else "王医生"
    ctx = Context(goal_set=True, revocable=[Ref("pref:1", f"I'd like {old} for this.", 2)])
    units = change_units(text, 9, ctx, language)
    assert [u.kind for u in units] == ["decision", "revocation"]
    assert units[0].text == note  # type: ignore[union-attr]
    assert units[1].target == "pref:1"  # type: ignore[union-attr]


def test_an_unnamed_value_change_takes_the_name_of_the_parameter_holding_it() -> None:
    ctx = Context(goal_set=True, params={"deposit": ("deposit", "$300")})
    [unit] = change_units("About it: I said $300, but it's actually $340.", 5, ctx, "en")
    assert unit.kind == "parameter" and unit.name == "deposit"  # type: ignore[union-attr]


def test_a_pinned_sentence_that_states_a_change_is_pinned_as_the_change() -> None:
    from app.compression.merge import merge
    from app.compression.render import render
    from app.compression.state import TaskState

    from .helpers import extract, user

    turns = [
        user(0, "帮我约一次皮肤科门诊。"),
        user(1, "花粉过敏复查的时间要改，6月1日去不了，改到6月8日。"),
    ]
    state = merge(TaskState(), extract(turns))
    [pinned] = state.high_stakes
    assert "6月8日" in pinned.text and "原为 6月1日" in pinned.text
    assert "6月1日去不了" not in render(state, language="zh")


@pytest.mark.parametrize(
    ("said", "name", "old", "new"),
    [
        ("The rate limit went from 100 to 250.", "rate limit", "100", "250"),
        ("Our spending cap moved from $500 to $800.", "spending cap", "$500", "$800"),
    ],
)
def test_a_name_ending_in_a_setting_verb_is_not_read_as_the_verb(
    said: str, name: str, old: str, new: str
) -> None:
    # "limit"/"cap" are also verbs of setting ("limit X to Y"); the word after them
    # here is the verb of the change, not a parameter's name.
    params = of_kind(extract([user(1, said)]), "parameter")
    assert [(p.name, p.previous, p.value) for p in params] == [(name, old, new)]


@pytest.mark.parametrize(
    ("said", "setting"),
    [
        (
            "Set the hotel budget to 250. Skip Acme this time and go with Zenith.",
            ("hotel budget", "250"),
        ),
        (
            "Change the guest count to 40. Not the Hilton — the Marriott instead.",
            ("guest count", "40"),
        ),
        ("人数改成 40 人。不要A酒店了，换B酒店。", ("人数", "40 人")),
    ],
)
def test_a_setting_said_beside_a_change_of_mind_still_holds(
    said: str, setting: tuple[str, str]
) -> None:
    units = extract([user(1, said)])
    params = [(p.name, p.value) for p in of_kind(units, "parameter")]
    assert setting in params, units
    # the change of mind is kept as well
    assert of_kind(units, "decision") or len(params) > 1, units

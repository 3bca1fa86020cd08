"""What live turns left out of the context add to the state (compression/live_notes.py):
new rules, pinned facts, next steps and open items, as the next compression renders
them; and a question the state shows as pending that the first live reply answered."""

from __future__ import annotations

import pytest

from app.compression.extract.rules import extract_units
from app.compression.live import LiveTurn
from app.compression.live_notes import (
    add_notes,
    answered,
    notes_for,
    resolve,
    retire,
    with_notes,
    withdrawn,
    withdraws,
)
from app.compression.merge import merge
from app.compression.render import render, render_tiers
from app.compression.state import TaskState
from app.core.turns import TurnView
from tests.unit.compression.helpers import assistant, user

EN_OPENING = [
    user(1, "We need to migrate the billing database to the new cluster."),
    user(2, "Set the replica count to 3."),
    assistant(3, "Noted."),
]
ZH_OPENING = [
    user(1, "我们要把账单数据库迁移到新集群。"),
    user(2, "副本数设为 3。"),
    assistant(3, "好的。"),
]


def _state(turns: list[TurnView]) -> TaskState:
    return merge(TaskState(), extract_units(turns, TaskState()), through_seq=turns[-1].seq)


def _live(turns: list[TurnView]) -> list[LiveTurn]:
    return [LiveTurn(t.seq, t.role, t.content) for t in turns]


def _section(text: str, header: str) -> list[str]:
    lines = text.split("\n")
    if header not in lines:
        return []
    out = []
    for line in lines[lines.index(header) + 1 :]:
        if not line.startswith(("- ", "Pending:", "待确认：")):
            break
        out.append(line)
    return out


NEW_UNITS = [
    (EN_OPENING, "Never run the migration during business hours.", "Constraints (must follow):"),
    (EN_OPENING, "My employee ID is E-448213.", "Pinned facts (always apply):"),
    (EN_OPENING, "I'm allergic to shellfish, keep that in mind for the team dinner.", None),
    (EN_OPENING, "Next, we still need to notify the finance team.", "Next steps:"),
    (ZH_OPENING, "迁移期间千万不要删除旧集群的数据。", "约束（必须遵守）："),
    (ZH_OPENING, "我的工号是 E-448213。", "重要信息（始终适用）："),
]


@pytest.mark.parametrize(("opening", "said", "header"), NEW_UNITS)
def test_a_left_out_turn_adds_what_the_next_compression_renders(
    opening: list[TurnView], said: str, header: str | None
) -> None:
    before = render(_state(opening))
    later = [user(4, said), assistant(5, "OK.")]
    compressed = render(_state([*opening, *later]))
    added = add_notes(before, notes_for(before, _live(later), {4}))
    headers = [header] if header else ["Pinned facts (always apply):"]
    for h in headers:
        new = [line for line in _section(compressed, h) if line not in _section(before, h)]
        assert new, (h, compressed)
        assert _section(added, h) == _section(compressed, h), (added, compressed)
    # Sections come in the renderer's order.
    order = [line for line in compressed.split("\n") if line.endswith((":", "："))]
    assert [line for line in added.split("\n") if line in order] == [
        line for line in order if line in added.split("\n")
    ]


def test_a_turn_in_the_context_adds_nothing() -> None:
    before = render(_state(EN_OPENING))
    later = [user(4, "Never run the migration during business hours.")]
    assert notes_for(before, _live(later), set()) == []
    assert notes_for(before, _live(later), {9}) == []


def test_what_the_state_already_shows_is_not_added_twice() -> None:
    opening = [*EN_OPENING, user(4, "Never run the migration during business hours.")]
    before = render(_state(opening))
    later = [user(5, "Never run the migration during business hours.")]
    assert notes_for(before, _live(later), {5}) == []


def test_a_rule_a_later_live_turn_withdrew_is_not_added() -> None:
    before = render(_state(EN_OPENING))
    later = [
        user(4, "Never run the migration during business hours."),
        assistant(5, "Understood."),
        user(6, "Scratch that, business hours are fine after all."),
    ]
    assert render(_state([*EN_OPENING, *later])).count("business hours") <= 1
    notes = notes_for(before, _live(later), {4})
    assert not [n for n in notes if n.section == "constraints"], notes


def test_only_user_turns_add_units() -> None:
    before = render(_state(EN_OPENING))
    later = [assistant(4, "Never run the migration during business hours.")]
    assert notes_for(before, _live(later), {4}) == []


def test_every_tier_takes_the_notes() -> None:
    state = _state(EN_OPENING)
    later = [user(4, "Never run the migration during business hours.")]
    notes = notes_for(render(state), _live(later), {4})
    for tier in render_tiers(state, max_tokens=200):
        added = add_notes(tier, notes)
        assert "- Never run the migration during business hours." in added.split("\n")


QUESTIONS = [
    (
        [
            user(1, "Please book a table for the team dinner."),
            assistant(2, "I found a table at Lumen for 8 people. Shall I book it?"),
        ],
        "Yes, go ahead.",
        "Pending: Shall I book it?",
    ),
    (
        [
            user(1, "帮我给团队订一桌晚餐。"),
            assistant(2, "找到了 Lumen 餐厅 8 人桌，需要我预订吗？"),
        ],
        "好的，订吧。",
        "待确认：找到了 Lumen 餐厅 8 人桌，需要我预订吗？",
    ),
]


@pytest.mark.parametrize(("opening", "reply", "pending"), QUESTIONS)
def test_a_question_answered_live_is_not_shown_as_open(
    opening: list[TurnView], reply: str, pending: str
) -> None:
    state = _state(opening)
    before = render(state)
    assert pending in before.split("\n")
    later = [user(3, reply), assistant(4, "Done.")]
    open_items = [p.model_dump(mode="json") for p in state.open_pending()]
    answers = answered(before, open_items, _live(later))
    resolved = resolve(before, answers)
    compressed = render(merge(state, extract_units(later, state), through_seq=4))
    assert pending not in resolved.split("\n")
    assert resolved == compressed.replace("(through turn 4)", "(through turn 2)").replace(
        "（截至第 4 轮）", "（截至第 2 轮）"
    ), (resolved, compressed)


def test_a_put_off_or_a_new_request_answers_nothing() -> None:
    opening = QUESTIONS[0][0]
    state = _state(opening)
    before = render(state)
    open_items = [p.model_dump(mode="json") for p in state.open_pending()]
    for reply in ("Let me check with my manager first.", "Show me other restaurants nearby."):
        assert answered(before, open_items, _live([user(3, reply)])) == [], reply
    # Only the first live reply can answer it.
    later = [user(3, "What time is it there?"), assistant(4, "7 pm."), user(5, "Yes.")]
    assert answered(before, open_items, _live(later)) == []


MOVED_PAST = [
    (
        [
            user(1, "Please plan the team offsite in Lisbon."),
            assistant(2, "I found three venues. Would you like me to check their catering?"),
            user(3, "The budget is 5000 euros."),
            assistant(4, "Noted."),
        ],
        ["Also book flights for twelve people from Berlin.", "And find a hotel near the venue."],
        "Pending: Would you like me to check their catering?",
    ),
    (
        [
            user(1, "帮我筹划团队在杭州的团建。"),
            assistant(2, "找到了三个场地。需要我查一下它们的餐饮安排吗？"),
            user(3, "预算是 5000 元。"),
            assistant(4, "好的。"),
        ],
        ["另外帮我订十二个人从北京出发的高铁票。", "再找一家离场地近的酒店。"],
        "待确认：需要我查一下它们的餐饮安排吗？",
    ),
]


def _compressed(state: TaskState, later: list[TurnView]) -> str:
    through = later[-1].seq
    title = state.last_seq
    after = render(merge(state, extract_units(later, state), through_seq=through))
    return after.replace(f"(through turn {through})", f"(through turn {title})").replace(
        f"（截至第 {through} 轮）", f"（截至第 {title} 轮）"
    )


@pytest.mark.parametrize(("opening", "replies", "pending"), MOVED_PAST)
def test_a_question_moved_past_twice_is_not_shown_as_open(
    opening: list[TurnView], replies: list[str], pending: str
) -> None:
    state = _state(opening)
    before = render(state)
    assert pending in before.split("\n"), before
    open_items = [p.model_dump(mode="json") for p in state.open_pending()]
    seq = opening[-1].seq
    later: list[TurnView] = []
    for i, reply in enumerate(replies):
        later += [user(seq + 1 + 2 * i, reply), assistant(seq + 2 + 2 * i, "OK.")]
        resolved = resolve(before, answered(before, open_items, _live(later)))
        # Once moved past it is gone, as from the next compression; not before.
        assert (pending in resolved.split("\n")) is (i == 0), (i, resolved)
        assert resolved == _compressed(state, later), (resolved, _compressed(state, later))


def test_a_question_put_off_stays_open_however_often_moved_past() -> None:
    opening, replies, pending = MOVED_PAST[0]
    state = _state(opening)
    before = render(state)
    open_items = [p.model_dump(mode="json") for p in state.open_pending()]
    later = [user(5, "Let me think about it."), assistant(6, "Sure.")]
    later += [user(7 + 2 * i, r) for i, r in enumerate(replies)]
    resolved = resolve(before, answered(before, open_items, _live(later)))
    assert pending in resolved.split("\n"), resolved
    assert pending in render(merge(state, extract_units(later, state))).split("\n")


EN_RULES = [
    user(1, "Please book flights from Boston to Denver for the conference."),
    user(2, "The budget limit is 900 dollars for the whole trip."),
    assistant(3, "Noted."),
    user(4, "Never book red-eye flights."),
    assistant(5, "OK."),
]
ZH_RULES = [
    user(1, "帮我订从上海到成都的机票。"),
    user(2, "预算不能超过 3000 元。"),
    assistant(3, "好的。"),
    user(4, "不要订红眼航班。"),
    assistant(5, "明白。"),
]
WITHDRAWALS = [
    (EN_RULES, "Actually, forget the budget limit.", "- The budget limit is 900 dollars"),
    (EN_RULES, "Scratch the no red-eye rule, any time is fine.", "- Never book red-eye"),
    (EN_RULES, "You can drop the red-eye restriction.", "- Never book red-eye"),
    (EN_RULES, "Never mind, scratch that.", "- Never book red-eye"),
    (ZH_RULES, "不用管预算了。", "- 预算不能超过"),
    (ZH_RULES, "红眼航班的限制取消吧。", "- 不要订红眼航班"),
    (ZH_RULES, "算了，当我没说。", "- 不要订红眼航班"),
]


def _in_force(state: TaskState) -> dict[str, list[dict[str, object]]]:
    pools = ("constraints", "todos", "preferences", "decisions")
    return {k: [i.model_dump(mode="json") for i in getattr(state, k)] for k in pools}


@pytest.mark.parametrize(("opening", "said", "rule"), WITHDRAWALS)
def test_a_rule_the_state_holds_withdrawn_live_stops_showing(
    opening: list[TurnView], said: str, rule: str
) -> None:
    state = _state(opening)
    before = render(state)
    assert any(line.startswith(rule) for line in _section(before, before.split("\n")[2]))
    later = [user(6, said), assistant(7, "OK.")]
    assert withdraws(before, _live(later))
    gone = withdrawn(before, _in_force(state), _live(later))
    after = retire(before, gone)
    # As the next compression renders it: no longer a rule, listed as withdrawn.
    assert after == _compressed(state, later), (after, _compressed(state, later))
    constraints = _section(after, after.split("\n")[2])
    assert not any(line.startswith(rule) for line in constraints), after
    # A smaller rendering only loses the line.
    assert retire(before, gone, listed=False).split("\n") == [
        line for line in before.split("\n") if not line.startswith(rule)
    ]


def test_a_bare_withdrawal_after_a_live_rule_withdraws_that_rule() -> None:
    state = _state(EN_RULES)
    before = render(state)
    later = [
        user(6, "Only book aisle seats."),
        assistant(7, "OK."),
        user(8, "Hmm, scratch that."),
    ]
    assert not withdraws(before, _live(later))
    assert withdrawn(before, _in_force(state), _live(later)) == []
    assert "Never book red-eye" in _compressed(state, later)


def test_nothing_is_withdrawn_without_a_withdrawal() -> None:
    state = _state(EN_RULES)
    before = render(state)
    later = [user(6, "Only book aisle seats."), user(7, "Thanks, what is next?")]
    assert withdrawn(before, _in_force(state), _live(later)) == []
    assert not withdraws(before, _live(later))


@pytest.mark.parametrize(
    "turns",
    [
        [
            user(1, "We need to migrate the billing database to the new cluster."),
            user(2, "Never run the migration during business hours."),
            assistant(3, "OK."),
            user(4, "Next, we still need to notify the finance team."),
            user(5, "My employee ID is E-448213."),
        ],
        [
            user(1, "我们要把账单数据库迁移到新集群。"),
            user(2, "迁移期间千万不要删除旧集群的数据。"),
            assistant(3, "好的。"),
            user(4, "我的工号是 E-448213。"),
        ],
    ],
)
def test_a_session_never_compressed_gets_the_state_of_its_left_out_notes(
    turns: list[TurnView],
) -> None:
    left = {t.seq for t in turns if t.role == "user"}
    noted = with_notes([""], _live(turns), left)
    assert noted is not None
    alone = noted[0]
    compressed = render(_state(turns))
    assert alone.split("\n")[0] == compressed.split("\n")[0]  # same title, same turn
    headers = [line for line in alone.split("\n")[1:] if line.endswith((":", "："))]
    assert headers, alone
    for header in headers:
        assert _section(alone, header) == _section(compressed, header), (alone, compressed)
    # Nothing left out: nothing to add.
    assert with_notes([""], _live(turns), set()) is None
    assert with_notes([""], _live(turns), {3}) is None

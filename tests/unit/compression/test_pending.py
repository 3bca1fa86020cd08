"""When an agent question stays pending, when a reply resolves it, when it has been
moved past — both languages, our own phrasings."""

from __future__ import annotations

import pytest

from app.compression.extract.deferral import is_bare, is_deferral
from app.compression.extract.rules import extract_units
from app.compression.merge import merge
from app.compression.render import render
from app.compression.state import TaskState
from app.core.turns import TurnView

# The speaker consults someone before answering, or puts the answer off: it waits on them.
PUTTING_OFF = [
    "Let me ask my landlord about the second parking spot.",
    "I'll check the venue dates with my co-organiser first.",
    "I need to confirm the headcount with our finance team.",
    "Let me run it past the committee.",
    "I'll talk to Marta before we commit.",
    "Let me see what my accountant says.",
    "We need to check the vendor terms with our lawyer.",
    "场地的事我先问问老板。",
    "我问一下财务那边。",
    "我回头跟设计师确认一下颜色。",
    "我得先和合伙人商量商量。",
    "我下周跟物业核实一下车位。",
    "这笔预算我明天请示一下领导。",
    "我问下我们主任。",
    # or first looks at their own calendar or budget, or simply puts it off
    "Let me look at our finances first.",
    "I have to double-check my schedule.",
    "I'd like to get my partner's take on it.",
    "I'll decide over the weekend.",
    "Remind me tomorrow.",
    "Maybe another time.",
    "Give me a day to think it through.",
    "我先翻一下我的日历。",
    "容我斟酌斟酌。",
    "等我消息吧。",
    "这事开完会再定。",
    "下周再说吧。",
]

# Not a deferral: a request that the agent consult someone, a consultation already
# done, a question to the agent, an offer to consult asked as a question.
NOT_PUTTING_OFF = [
    "Check the venue dates with the caterer.",
    "Please ask the hotel whether breakfast is included.",
    "Let me ask you about the cancellation policy.",
    "Let me ask: does the room have a balcony?",
    "I want to pay with my debit card.",
    "Should I check with the florist first?",
    "帮我跟酒店确认一下退房时间。",
    "你先问问航空公司能不能改签。",
    "我问一下，押金能退吗？",
    "我跟设计师确认过了，用浅灰色。",
    "我和合伙人商量好了，就签这家。",
    "我要跟你核对一下地址。",
    "要不要我先问问供应商？",
    "Review the quote and send it by Monday.",
    "I'll see you at the venue.",
    "Find out whether the hall has parking.",
    "I want my deposit back, ok.",
    "你再说一遍刚才的价格。",
    "我来想想办法。",
    "帮我查一下我的行程。",
    "付款完再告诉我总额。",
]


@pytest.mark.parametrize("sentence", PUTTING_OFF)
def test_consulting_someone_or_putting_it_off_is_a_deferral(sentence: str) -> None:
    assert is_deferral(sentence)


@pytest.mark.parametrize("sentence", NOT_PUTTING_OFF)
def test_asking_the_agent_or_having_consulted_is_not(sentence: str) -> None:
    assert not is_deferral(sentence)


def _turns(script: list[tuple[str, str]], start: int = 0) -> list[TurnView]:
    return [
        TurnView(seq=start + i, role=role, content=text) for i, (role, text) in enumerate(script)
    ]


def _state(*slices: list[tuple[str, str]]) -> TaskState:
    """The state after compressing each slice in turn (as the worker would)."""
    state, seq = TaskState(), 0
    for script in slices:
        turns = _turns(script, seq)
        state = merge(state, extract_units(turns, state), through_seq=turns[-1].seq)
        seq += len(turns)
    return state


# Per language: the task, an agent confirmation question, four turns of moving on,
# and the line that shows the question still open.
_SCRIPT = {
    "en": (
        [("user", "Please organise the team offsite in Porto.")],
        "The caterer can add a vegan menu for $12 a head. Shall I add it?",
        [
            ("user", "Book the coach for 40 people."),
            ("assistant", "Done, the coach is reserved."),
            ("user", "Never schedule anything before 9am."),
            ("user", "Find a photographer for the second evening."),
        ],
        "Pending: Shall I add it?",
    ),
    "zh": (
        [("user", "帮我筹备一下公司年会。")],
        "会场可以加一块LED屏，费用两千元。要不要我加上？",
        [
            ("user", "大巴按四十人订。"),
            ("assistant", "好的，大巴已经订好了。"),
            ("user", "活动千万不要早于上午九点开始。"),
            ("user", "再帮我找一位第二天晚上的摄影师。"),
        ],
        "待确认：要不要我加上？",
    ),
}


def _open(language: str, *slices: list[tuple[str, str]]) -> bool:
    """Whether the agent's question is shown as still awaited."""
    return _SCRIPT[language][3] in render(_state(*slices), language=language)


@pytest.mark.parametrize(
    ("language", "reply"),
    [
        ("en", "I'll check the dietary list with our HR lead first."),
        ("en", "Let me ask my manager whether the budget allows it."),
        # a yes/no cue that only acknowledges before putting it off
        ("en", "OK, let me look at our budget first."),
        ("en", "Wait, I'll run it past my co-founder."),
        ("zh", "我得先跟行政主管确认一下预算。"),
        ("zh", "屏幕的事我先问问老板。"),
        ("zh", "好的，我先问问老板。"),
        # a bare put-off holds the question too
        ("en", "Maybe later."),
        ("zh", "嗯，改天再说吧。"),
        ("zh", "等等，容我再想想。"),
    ],
)
def test_a_question_put_off_to_consult_someone_stays_pending(language: str, reply: str) -> None:
    goal, ask, move_on, _ = _SCRIPT[language]
    asked = [*goal, ("assistant", ask), ("user", reply)]
    assert _open(language, asked + move_on)
    assert _open(language, asked, move_on)  # the moving on in the next compression


@pytest.mark.parametrize(
    ("sentence", "bare"),
    [
        ("Maybe later.", True),
        ("Let me think about it.", True),
        ("Let me think about the parking permit.", False),
        ("Could we leave the welcome drinks undecided for now?", False),
        ("嗯，改天再说吧。", True),
        ("停车证我再想想。", False),
        ("Park the spare printer for now.", False),
        ("等老周点头再说。", False),
        ("我再看看。", True),
    ],
)
def test_a_bare_put_off_names_nothing(sentence: str, bare: bool) -> None:
    assert is_deferral(sentence) and is_bare(sentence) is bare


@pytest.mark.parametrize(
    ("language", "remark", "reply"),
    [
        ("en", "The harbour museum has a rooftop café.", "OK, maybe later."),
        ("en", "That plugin has 40k installs.", "We'll see."),
        ("zh", "这家插画店的周边挺受欢迎的。", "嗯，改天再说吧。"),
        ("zh", "这个插件评分四点五。", "好，等我消息吧。"),
    ],
)
def test_a_bare_put_off_with_nothing_asked_is_not_pending(
    language: str, remark: str, reply: str
) -> None:
    """Nothing was asked and the put-off names nothing: nobody awaits anything."""
    state = _state([*_SCRIPT[language][0], ("assistant", remark), ("user", reply)])
    assert not state.open_pending()


@pytest.mark.parametrize(
    ("language", "reply"),
    [
        ("en", "Yes, go ahead."),
        ("en", "No, skip the vegan menu."),
        ("zh", "可以，加上吧。"),
        ("zh", "不用了，预算不够。"),
        # a yes that asks for something once someone confirms is still a yes
        ("en", "Yes, add it once the caterer confirms the price."),
        # not answered, and moved past: no longer awaited either
        ("en", "What time does the ferry leave?"),
        ("zh", "年会那天会下雨吗？"),
    ],
)
def test_a_question_answered_or_moved_past_is_not_pending(language: str, reply: str) -> None:
    goal, ask, move_on, _ = _SCRIPT[language]
    assert not _open(language, [*goal, ("assistant", ask), ("user", reply), *move_on])


@pytest.mark.parametrize(
    ("language", "reply", "answer"),
    [
        ("en", "I'll talk to our office manager first.", "Yes, please add it."),
        ("zh", "我先问问老板。", "好的，加上吧。"),
    ],
)
def test_a_put_off_question_asked_again_is_resolved_by_the_answer(
    language: str, reply: str, answer: str
) -> None:
    goal, ask, move_on, _ = _SCRIPT[language]
    first = [*goal, ("assistant", ask), ("user", reply), *move_on]
    again = [("assistant", ask), ("user", answer)]
    assert _open(language, first)
    assert not _open(language, first, again)


@pytest.mark.parametrize(
    ("language", "small_talk", "reply"),
    [
        ("en", "How was your holiday?", "Lovely, thanks, we went to the coast."),
        ("en", "Did you have a nice weekend?", "Yes, very relaxing."),
        ("zh", "周末过得怎么样？", "挺好的，去郊外走了走。"),
        ("zh", "你假期过得好吗？", "好的呀，休息得不错。"),
    ],
)
def test_small_talk_questions_are_neither_pending_nor_answered(
    language: str, small_talk: str, reply: str
) -> None:
    state = _state(_SCRIPT[language][0] + [("assistant", small_talk), ("user", reply)])
    assert not state.pending
    assert small_talk.rstrip("?？") not in render(state, language=language)

"""User-stated identifiers, agent questions moved past, and the extractive summary
(our own variants)."""

from __future__ import annotations

import pytest

from app.compression.extract.identifiers import identifier_units
from app.compression.extract.rules import extract_units
from app.compression.merge import merge
from app.compression.render import render
from app.compression.state import TaskState
from app.core.turns import TurnView


@pytest.mark.parametrize(
    ("sentence", "pinned"),
    [
        ("Hi, my customer ID is leo_park_5521 and I need help.", "customer ID: leo_park_5521"),
        ("The order number is 771-2290431-1180, if that helps.", "order number: 771-2290431-1180"),
        ("Q-4471 is my case number.", "case number: Q-4471"),
        ("You can email me at rui.tan@example.org.", "email: rui.tan@example.org"),
        ("我的工号是 T20931，帮我查下年假。", "工号: T20931"),
        ("手机号 150-2233-9081，有事打我。", "手机号: 150-2233-9081"),
        ("My order number is 402-7781-3356, can you check it?", "order number: 402-7781-3356"),
        ("我的会员号是 HK-88120，能查一下积分吗？", "会员号: HK-88120"),
    ],
)
def test_identifiers_the_user_states_are_pinned(sentence: str, pinned: str) -> None:
    units = identifier_units(sentence, 3)
    assert [u.text for u in units] == [pinned]
    assert units[0].category == "identity" and units[0].emphasized


def test_payment_cards_and_words_are_not_identifiers() -> None:
    assert identifier_units("my card number is 4111 1111 1111 1111", 1) == []
    assert identifier_units("My booking reference is in the email.", 1) == []


@pytest.mark.parametrize(
    "sentence",
    [
        "The app suggested ticket number TK-5530, what is that?",
        "看到一个编号 ZX-9012 的套餐，是什么？",
    ],
)
def test_a_code_the_user_asks_about_is_browsing_not_their_identifier(sentence: str) -> None:
    assert identifier_units(sentence, 1) == []


def turn(seq: int, role: str, content: str) -> TurnView:
    return TurnView(seq=seq, role=role, content=content)


def test_a_stated_id_survives_every_compaction() -> None:
    first = [turn(0, "user", "Hello, my user ID is ana_ruiz_3307. I want to change a flight.")]
    state = merge(TaskState(), extract_units(first, TaskState()), through_seq=0)
    for seq in range(1, 40, 2):
        more = [
            turn(seq, "assistant", f"Step {seq} is done."),
            turn(seq + 1, "user", f"Fine, continue with step {seq + 2}."),
        ]
        state = merge(state, extract_units(more, state), through_seq=seq + 1)
    assert "ana_ruiz_3307" in render(state, language="en", max_tokens=60)


@pytest.mark.parametrize(
    ("asked", "replies", "gone"),
    [
        (
            "Would you like me to add a birthday note?",
            ["The budget is $150 for dinner.", "Never seat us near the kitchen."],
            "birthday note",
        ),
        # a request phrased as an instruction expires like a question
        (
            "Please confirm the card you want any fare difference charged to.",
            ["Actually, first tell me whether pets are allowed on deck.", "Never book inside."],
            "fare difference",
        ),
    ],
)
def test_an_agent_question_the_user_moved_past_is_not_pending_forever(
    asked: str, replies: list[str], gone: str
) -> None:
    turns = [
        turn(0, "user", "Please sort out my booking for the weekend."),
        turn(1, "assistant", asked),
        turn(2, "user", replies[0]),
        turn(3, "assistant", "Noted."),
        turn(4, "user", replies[1]),
    ]
    state = merge(TaskState(), extract_units(turns, TaskState()), through_seq=4)
    text = render(state, language="en")
    assert gone not in text  # neither pending nor listed as answered


def test_a_question_the_user_put_off_stays_pending() -> None:
    turns = [
        turn(0, "user", "Please book a table for two at Nopa tonight."),
        turn(1, "assistant", "Should I pay the deposit now?"),
        turn(2, "user", "Let me check with my partner first."),
        turn(3, "user", "The budget is $150 for dinner."),
        turn(4, "user", "Never seat us near the kitchen."),
    ]
    state = merge(TaskState(), extract_units(turns, TaskState()), through_seq=4)
    assert "Pending: Should I pay the deposit now?" in render(state, language="en")


@pytest.mark.parametrize(
    ("language", "turns", "kept", "speaker"),
    [
        (
            "en",
            [
                "Please plan the garden shed build.",
                "The lot is on a slope, so assume the base needs concrete piers before 2027 rules.",
                "Lovely weather today!",
            ],
            "concrete piers",
            "User: ",
        ),
        (
            "zh",
            [
                "帮我规划一下新店开业。",
                "这栋楼是九十年代建的，所以线路默认要重新走。",
                "今天天气真好哈哈。",
            ],
            "九十年代",
            "用户：",
        ),
    ],
)
def test_the_summary_keeps_salient_sentences_no_unit_holds(
    language: str, turns: list[str], kept: str, speaker: str
) -> None:
    views = [turn(i, "user", text) for i, text in enumerate(turns)]
    units = extract_units(views, TaskState())
    [summary] = [u for u in units if u.kind == "summary"]
    assert kept in summary.text and summary.text.startswith(speaker)
    assert "weather" not in summary.text and "天气" not in summary.text


def test_questions_answered_with_details_the_rules_do_not_structure_expire() -> None:
    turns = [
        turn(0, "user", "I need to move my dentist appointment."),
        turn(1, "assistant", "Which clinic is it, and what is the booking reference?"),
        turn(2, "user", "The one on Harbour Street, reference is on my phone somewhere."),
        turn(3, "assistant", "Could you also tell me your date of birth?"),
        turn(4, "user", "It's the fourth of March, nineteen ninety."),
        turn(5, "user", "And ideally a morning slot next week."),
    ]
    state = merge(TaskState(), extract_units(turns, TaskState()), through_seq=5)
    text = render(state, language="en")
    assert "Pending:" not in text and "date of birth" not in text


@pytest.mark.parametrize(
    ("first", "later", "line"),
    [
        # the user's own deferral, asked as a question
        (
            [
                ("user", "Please set up the newsletter."),
                ("user", "Can we leave the welcome discount open for now?"),
            ],
            [
                ("user", "Use the blue template."),
                ("user", "Send it on Mondays at nine."),
                ("user", "Add the unsubscribe link at the bottom."),
            ],
            "Pending: Can we leave the welcome discount open for now?",
        ),
        # an agent question the user put off in the previous slice
        (
            [
                ("user", "Help me plan the move to the new flat."),
                ("assistant", "The movers offer packing for $120. Shall I add it?"),
                ("user", "Let me think about the packing."),
            ],
            [
                ("user", "The van has to be there by 9am on Saturday."),
                ("assistant", "Noted."),
                ("user", "Never leave boxes in the hallway."),
            ],
            "Pending: Shall I add it?",
        ),
    ],
)
def test_what_the_user_left_open_does_not_expire_in_a_later_compression(
    first: list[tuple[str, str]], later: list[tuple[str, str]], line: str
) -> None:
    one = [turn(i, role, text) for i, (role, text) in enumerate(first)]
    state = merge(TaskState(), extract_units(one, TaskState()), through_seq=len(one) - 1)
    two = [turn(len(one) + i, role, text) for i, (role, text) in enumerate(later)]
    state = merge(state, extract_units(two, state), through_seq=two[-1].seq)
    assert line in render(state, language="en")

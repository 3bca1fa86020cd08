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
    ],
)
def test_identifiers_the_user_states_are_pinned(sentence: str, pinned: str) -> None:
    units = identifier_units(sentence, 3)
    assert [u.text for u in units] == [pinned]
    assert units[0].category == "identity" and units[0].emphasized


def test_payment_cards_and_words_are_not_identifiers() -> None:
    assert identifier_units("my card number is 4111 1111 1111 1111", 1) == []
    assert identifier_units("My booking reference is in the email.", 1) == []


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


def test_an_agent_question_the_user_moved_past_is_not_pending_forever() -> None:
    turns = [
        turn(0, "user", "Please book a table for two at Nopa tonight."),
        turn(1, "assistant", "Would you like me to add a birthday note?"),
        turn(2, "user", "The budget is $150 for dinner."),
        turn(3, "assistant", "Noted."),
        turn(4, "user", "Never seat us near the kitchen."),
    ]
    state = merge(TaskState(), extract_units(turns, TaskState()), through_seq=4)
    text = render(state, language="en")
    assert "birthday note" not in text  # neither pending nor listed as answered


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


def test_a_deferral_asked_as_a_question_does_not_expire_in_a_later_compression() -> None:
    first = [
        turn(0, "user", "Please set up the newsletter."),
        turn(1, "user", "Can we leave the welcome discount open for now?"),
    ]
    state = merge(TaskState(), extract_units(first, TaskState()), through_seq=1)
    later = [
        turn(2, "user", "Use the blue template."),
        turn(3, "user", "Send it on Mondays at nine."),
        turn(4, "user", "Add the unsubscribe link at the bottom."),
    ]
    state = merge(state, extract_units(later, state), through_seq=4)
    assert "Pending: Can we leave the welcome discount open for now?" in render(
        state, language="en"
    )

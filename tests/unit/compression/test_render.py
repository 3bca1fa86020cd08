"""Rendering: fixed template, markers, languages, token budget."""

from __future__ import annotations

import pytest

from app.compression.merge import merge
from app.compression.render import detect_language, render
from app.compression.state import (
    ActionUnit,
    ArtifactUnit,
    BlockerUnit,
    ConstraintUnit,
    FactUnit,
    GoalUnit,
    HighStakesUnit,
    ParameterUnit,
    PendingUnit,
    RevocationUnit,
    TaskState,
    TodoUnit,
)
from app.core.tokens import count_tokens


@pytest.fixture
def state() -> TaskState:
    return merge(
        TaskState(),
        [
            GoalUnit(text="Book a Lisbon→Tokyo trip.", source_seqs=[0]),
            ConstraintUnit(text="Never book red-eye flights.", source_seqs=[1], emphasized=True),
            ConstraintUnit(text="Only aisle seats.", source_seqs=[2]),
            RevocationUnit(
                text="aisle is not required", target="Only aisle seats.", source_seqs=[20]
            ),
            HighStakesUnit(text="Allergic to peanuts.", category="allergy", source_seqs=[3]),
            ActionUnit(
                tool="book_flight",
                arguments={"flight": "TP204"},
                status="done",
                result_summary="pnr=QX7T2L, status=confirmed",
                call_id="c1",
                source_seqs=[4, 5],
            ),
            ActionUnit(
                tool="search_hotels",
                arguments={"city": "Tokyo"},
                status="failed",
                result_summary="error: timeout",
                call_id="c2",
                source_seqs=[6, 7],
            ),
            ParameterUnit(name="budget", value="$1200", source_seqs=[8]),
            ParameterUnit(name="budget", value="$1500", source_seqs=[12]),
            ArtifactUnit(artifact_kind="booking_ref", value="QX7T2L", label="pnr", source_seqs=[5]),
            PendingUnit(text="Shall I book the Hilton for 3 nights?", source_seqs=[14]),
            TodoUnit(
                text="book airport transfer",
                missing_prerequisites=["arrival time"],
                source_seqs=[15],
            ),
            BlockerUnit(text="Hotel API credentials expired.", source_seqs=[16]),
            FactUnit(text="Conference starts 2026-03-05.", source_seqs=[17]),
        ],
        through_seq=20,
    )


def test_english_render_has_every_marker(state: TaskState) -> None:
    text = render(state, language="en")
    lines = text.splitlines()
    assert lines[0] == "## Task state (through turn 20)"
    assert "Goal: Book a Lisbon→Tokyo trip." in lines
    assert "- Never book red-eye flights. (!)" in lines
    assert "- Allergic to peanuts." in lines
    assert "Done book_flight(flight=TP204) → pnr=QX7T2L, status=confirmed" in lines
    assert "Failed search_hotels(city=Tokyo) → error: timeout" in lines
    assert "- budget: $1500 (was $1200)" in lines
    assert "Pending: Shall I book the Hilton for 3 nights?" in lines
    assert "- book airport transfer (missing: arrival time)" in lines
    assert "- Hotel API credentials expired." in lines
    # Revoked constraints are not presented as rules.
    constraints = text.split("Constraints (must follow):")[1].split("Pinned facts")[0]
    assert "Only aisle seats." not in constraints
    assert "No longer applies:\n- Only aisle seats." in text


def test_chinese_render_uses_chinese_markers(state: TaskState) -> None:
    text = render(state, language="zh")
    lines = text.splitlines()
    assert lines[0] == "## 任务状态（截至第 20 轮）"
    assert "已完成 book_flight(flight=TP204) → pnr=QX7T2L, status=confirmed" in lines
    assert "失败 search_hotels(city=Tokyo) → error: timeout" in lines
    assert "- budget：$1500 (原为 $1200)" in lines
    assert "待确认：Shall I book the Hilton for 3 nights?" in lines
    assert "- book airport transfer（缺少：arrival time）" in lines


def test_every_action_line_starts_with_its_status_marker(state: TaskState) -> None:
    for language, done, failed in (("en", "Done", "Failed"), ("zh", "已完成", "失败")):
        text = render(state, language=language)
        header = (
            "Actions taken (do not repeat):" if language == "en" else "已执行的操作（勿重复）："
        )
        block = text.split(header + "\n")[1].split("\n")
        action_lines = [line for line in block if "(" in line and "→" in line][:2]
        assert [line.split(" ")[0] for line in action_lines] == [done, failed]


def test_language_defaults_to_state_language(state: TaskState) -> None:
    zh_state = state.model_copy(update={"language": "zh"})
    assert render(zh_state).startswith("## 任务状态")
    assert render(state.model_copy(update={"language": None})).startswith("## Task state")


def test_empty_state_renders_nothing() -> None:
    assert render(TaskState()) == ""


def test_repeats_and_failures_are_shown() -> None:
    units = [
        ActionUnit(
            tool="pay",
            arguments={"amount": 5},
            status="failed",
            call_id="a",
            result_summary="error: 502",
            source_seqs=[1],
        ),
        ActionUnit(
            tool="pay",
            arguments={"amount": 5},
            status="done",
            call_id="b",
            result_summary="paid",
            source_seqs=[3],
        ),
    ]
    text = render(merge(TaskState(), units), language="en")
    assert "Done pay(amount=5) → paid (2 calls, 1 failed)" in text.splitlines()


def test_no_raw_tool_dumps_and_long_arguments_are_clipped() -> None:
    long = "x" * 5000
    state = merge(
        TaskState(),
        [
            ActionUnit(
                tool="write",
                arguments={"body": long, "a": 1, "b": 2, "c": 3, "d": 4, "e": 5},
                status="done",
                result_summary="ok",
                source_seqs=[1],
            )
        ],
    )
    line = render(state, language="en").splitlines()[-1]
    assert len(line) < 200 and line.startswith("Done write(body=xxx") and ", …)" in line


def test_decayed_non_core_items_are_hidden_but_core_items_never() -> None:
    state = merge(
        TaskState(),
        [
            FactUnit(text="Old fact costs $5.", source_seqs=[0]),
            ConstraintUnit(text="Never fly Ryanair.", source_seqs=[0]),
            PendingUnit(text="Shall I book?", source_seqs=[0]),
        ],
        through_seq=500,
    )
    text = render(state, language="en")
    assert "Old fact" not in text
    assert "Never fly Ryanair." in text and "Pending: Shall I book?" in text


@pytest.mark.parametrize("budget", [40, 60, 80, 120, 160])
def test_budget_drops_low_priority_first_and_never_core(state: TaskState, budget: int) -> None:
    full = render(state, language="en")
    text = render(state, language="en", max_tokens=budget)
    for must in (
        "Never book red-eye flights.",
        "Allergic to peanuts.",
        "Pending: Shall I book the Hilton for 3 nights?",
    ):
        assert must in text
    core_only = render(state, language="en", max_tokens=1)
    if count_tokens(core_only) <= budget:
        assert count_tokens(text) <= budget
    assert count_tokens(text) <= count_tokens(full)
    # The revoked rule is the first to go, then the fact.
    if "No longer applies" in text:
        assert "Conference starts" in text


def test_budget_keeps_order_of_drop_revoked_then_facts_then_artifacts(state: TaskState) -> None:
    full_tokens = count_tokens(render(state, language="en"))
    text = render(state, language="en", max_tokens=full_tokens - 5)
    assert "No longer applies" not in text
    assert "Conference starts 2026-03-05." in text
    assert render(state, language="en", max_tokens=full_tokens) == render(state, language="en")


def test_custom_token_counter_is_used(state: TaskState) -> None:
    text = render(state, language="en", max_tokens=200, count_tokens=len)
    assert len(text) <= 200 or "Never book red-eye" in text
    assert "Pending:" in text


@pytest.mark.parametrize(
    ("texts", "language"),
    [
        (["千万不要订红眼航班", "好的"], "zh"),
        (["把 batch size 改成 64"], "zh"),
        (["请把 learning rate 和 batch size 都调整一下"], "zh"),
        (["Never book red-eye flights."], "en"),
        (["Book a hotel in 东京 for me please"], "en"),
        ([], "en"),
        ([None, ""], "en"),
        # Tool output: JSON keys, ids, numbers and paths are neither language.
        (
            [
                "帮我订一张去东京的机票。",
                '{"flight_id": "TP204", "status": "confirmed", "depart_at": "2026-05-12T09:40",'
                ' "arrive_at": "2026-05-13T06:10", "fare_total": 1180, "currency": "EUR",'
                ' "baggage_allowance_kg": 23, "cabin_class": "economy", "carrier_code": "TP"}',
                '{"results": [{"hotel_code": "H4001", "price_per_night": 180, "area": "新宿"}]}',
                "已订好，编号 TP204。",
            ],
            "zh",
        ),
        (["把 batch_size 改成 64，learning_rate 设为 3e-4，输出到 /data/out/run_12"], "zh"),
        (['{"message": "Booked, thanks", "pnr": "QX7T2L"}', "Book a hotel in Tokyo."], "en"),
    ],
)
def test_detect_language(texts: list[str | None], language: str) -> None:
    assert detect_language(texts) == language

"""The action ledger: never lost to age, compressed rather than cut when it grows."""

from __future__ import annotations

import pytest

from app.compression.ledger import FULL_LEDGER_CALLS, Detail, ledger_lines
from app.compression.merge import merge
from app.compression.render import LABELS, render
from app.compression.state import (
    ActionUnit,
    ConstraintUnit,
    DecisionUnit,
    FactUnit,
    PendingUnit,
    PreferenceUnit,
    TaskState,
    TodoUnit,
    Unit,
)
from app.core.tokens import count_tokens

MARKERS = {"en": ("Done ", "Failed "), "zh": ("已完成 ", "失败 ")}


def booking(i: int, seq: int) -> ActionUnit:
    return ActionUnit(
        tool="book_flight",
        arguments={"flight": f"TP{200 + i}", "seat": "aisle"},
        status="done",
        result_summary=f"pnr=PNR{i:03d}, status=confirmed, +2 more fields",
        result_type="object",
        ref_paths=["$.pnr"],
        call_id=f"b{i}",
        source_seqs=[seq, seq + 1],
    )


def lookup(i: int, seq: int) -> ActionUnit:
    return ActionUnit(
        tool="search_hotels",
        arguments={"area": "Shinjuku", "max_price": 180 + 10 * i},
        status="done",
        result_summary="count=12, results: 12 items",
        result_type="object",
        ref_paths=["$.results"],
        call_id=f"s{i}",
        source_seqs=[seq, seq + 1],
    )


FAILED = ActionUnit(
    tool="book_restaurant",
    arguments={"restaurant": "Sushi Dai", "party": 8},
    status="failed",
    result_summary="error: party size exceeds the maximum of 6",
    result_type="error",
    call_id="r1",
    source_seqs=[3, 4],
)


def long_session(bookings: int = 15, lookups: int = 25) -> list[Unit]:
    units: list[Unit] = [
        ConstraintUnit(text="Never book red-eye flights.", source_seqs=[0]),
        PendingUnit(text="Shall I add travel insurance?", source_seqs=[1]),
        TodoUnit(
            text="book the airport transfer",
            missing_prerequisites=["landing time"],
            source_seqs=[2],
        ),
        FAILED,
    ]
    seq = 10
    for i in range(max(bookings, lookups)):
        if i < bookings:
            units.append(booking(i, seq))
        if i < lookups:
            units.append(lookup(i, seq + 2))
        seq += 8
    return units


@pytest.mark.parametrize("language", ["en", "zh"])
def test_actions_and_open_todos_stay_rendered_however_old(language: str) -> None:
    units = [
        booking(0, 1),
        FAILED,
        TodoUnit(
            text="book the airport transfer",
            missing_prerequisites=["landing time"],
            source_seqs=[5],
        ),
        TodoUnit(text="write the summary", source_seqs=[6]),
        TodoUnit(text="write the summary", status="done", source_seqs=[7]),
        FactUnit(text="The hotel costs $180 per night.", source_seqs=[8]),
    ]
    state = merge(TaskState(), units, through_seq=1000)
    assert [a.activity for a in state.actions] == [1.0, 1.0]
    assert {t.text: t.activity for t in state.todos}["book the airport transfer"] == 1.0
    text = render(state, language=language)
    done, failed = MARKERS[language]
    lines = text.splitlines()
    assert any(line.startswith(done + "book_flight") and "PNR000" in line for line in lines)
    assert any(
        line.startswith(failed + "book_restaurant") and "party size" in line for line in lines
    )
    assert any(line.startswith("- book the airport transfer") for line in lines)
    # Genuinely non-core items still decay out.
    assert "$180" not in text and f"{done}write the summary" not in text


def test_short_ledger_is_one_line_per_call() -> None:
    state = merge(TaskState(), [booking(i, 10 * i) for i in range(FULL_LEDGER_CALLS)])
    text = render(state, language="en")
    assert sum(line.startswith("Done book_flight(") for line in text.splitlines()) == 12


@pytest.mark.parametrize("language", ["en", "zh"])
def test_long_ledger_groups_older_calls_of_a_tool_and_keeps_their_ids(language: str) -> None:
    state = merge(TaskState(), long_session())
    lines = render(state, language=language).splitlines()
    done, failed = MARKERS[language]
    flights = [line for line in lines if line.startswith(f"{done}book_flight")]
    # Every booking is still there with its id, most of them on one grouped line.
    assert all(any(f"PNR{i:03d}" in line for line in flights) for i in range(15))
    grouped = [line for line in flights if "×" in line]
    assert len(grouped) == 1 and "(seat=aisle; flight → pnr): TP200 → PNR000; " in grouped[0]
    # Lookups without ids fold into one line listing the arguments tried.
    [hotels] = [line for line in lines if line.startswith(f"{done}search_hotels ×")]
    assert "area=Shinjuku" in hotels and "max_price=180|190|" in hotels
    assert sum(line.startswith(f"{done}search_hotels(") for line in lines) == 1
    assert any(line.startswith(f"{failed}book_restaurant") for line in lines)
    assert len(lines) < 20


def _section(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    if header not in lines:
        return []
    body = lines[lines.index(header) + 1 :]
    return [line for line in body if not line.endswith((":", "："))] if body else []


def test_budget_compresses_the_ledger_before_dropping_what_matters() -> None:
    units = [
        *long_session(),
        PreferenceUnit(text="I prefer aisle seats.", source_seqs=[5]),
        DecisionUnit(text="We go with ANA.", source_seqs=[6]),
        FactUnit(text="The hotel costs $180 per night.", source_seqs=[400]),
    ]
    state = merge(TaskState(), units)
    full = render(state, language="en")
    ids = [f"PNR{i:03d}" for i in range(15)]
    seen_levels = set()
    # Below this, only what is never dropped and the open todo fit.
    smallest = count_tokens(render(state, language="en", max_tokens=1)) + 40
    for budget in range(smallest, count_tokens(full) + 20, 5):
        text = render(state, language="en", max_tokens=budget)
        # Never dropped: constraints, pending confirmations.
        assert "Never book red-eye flights." in text and "Pending: Shall I add" in text
        # Every tool keeps a "Done"/"Failed" line at every budget where anything fits.
        for tool in ("book_flight", "search_hotels"):
            assert any(line.startswith("Done ") and tool in line for line in text.splitlines())
        assert any(line.startswith("Failed book_restaurant") for line in text.splitlines())
        # Ids outlive preferences; the fact and the decision go before the ledger is cut to ids.
        if "I prefer aisle seats." in text:
            assert all(i in text for i in ids)
        if "ANA" in text or "$180" in text:
            assert "max_price=180|" in text
        seen_levels.add(
            "minimal"
            if not any(i in text for i in ids)
            else "ids"
            if "max_price" not in text
            else "grouped"
        )
    assert seen_levels == {"minimal", "ids", "grouped"}
    assert render(state, language="en", max_tokens=count_tokens(full)) == full


def test_ledger_levels_keep_every_call_s_existence() -> None:
    state = merge(TaskState(), long_session())
    lab = LABELS["en"]
    for detail in Detail:
        text = "\n".join(line.text for line in ledger_lines(state.actions, lab, detail))
        assert "book_flight" in text and "search_hotels" in text and "book_restaurant" in text
    minimal = {line.text for line in ledger_lines(state.actions, lab, Detail.MINIMAL)}
    assert minimal == {"Done book_flight ×15, search_hotels ×25", "Failed book_restaurant"}


def test_compact_ledger_keeps_ids_but_not_arguments() -> None:
    state = merge(TaskState(), long_session())
    lines = [line.text for line in ledger_lines(state.actions, LABELS["en"], Detail.COMPACT)]
    [flights] = [line for line in lines if line.startswith("Done book_flight ×15")]
    assert flights.startswith("Done book_flight ×15 (pnr): PNR000; PNR001; ")
    assert "flight=" not in flights
    assert "Done search_hotels ×25" in lines

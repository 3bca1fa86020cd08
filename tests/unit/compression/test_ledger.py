"""The action ledger: never lost to age, compressed rather than cut when it grows."""

from __future__ import annotations

import pytest

from app.compression.ledger import FULL_LEDGER_CALLS, Detail, ToolKind, ledger_lines, tool_kind
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
    result_summary="error: party size is over the limit of 6 guests",
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
    units: list[Unit] = [
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
def test_long_ledger_lists_every_write_and_groups_reads(language: str) -> None:
    state = merge(TaskState(), long_session())
    lines = render(state, language=language).splitlines()
    done, failed = MARKERS[language]
    flights = [line for line in lines if line.startswith(f"{done}book_flight")]
    # Every booking keeps its own line with its id; the oldest ones are shortened.
    assert all(sum(f"PNR{i:03d}" in line for line in flights) == 1 for i in range(15))
    assert len(flights) == 15
    # Lookups are one line with their count; the prices browsed were never used.
    [hotels] = [line for line in lines if "search_hotels" in line]
    assert hotels == f"{LABELS[language]['read']} search_hotels ×25"
    assert any(
        line.startswith(f"{failed}book_restaurant") and "party size" in line for line in lines
    )


def _section(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    if header not in lines:
        return []
    body = lines[lines.index(header) + 1 :]
    return [line for line in body if not line.endswith((":", "："))] if body else []


def test_budget_shortens_the_ledger_but_never_drops_a_write() -> None:
    units = [
        *long_session(),
        PreferenceUnit(text="I prefer aisle seats.", source_seqs=[5]),
        DecisionUnit(text="We go with ANA.", source_seqs=[6]),
        FactUnit(text="The hotel costs $180 per night.", source_seqs=[400]),
    ]
    state = merge(TaskState(), units)
    full = render(state, language="en")
    ids = [f"PNR{i:03d}" for i in range(15)]
    sizes = set()
    for budget in range(50, count_tokens(full) + 20, 10):
        text = render(state, language="en", max_tokens=budget)
        sizes.add(count_tokens(text))
        assert "Never book red-eye flights." in text and "Pending: Shall I add" in text
        # Every write, with its id and its outcome, at every budget.
        assert all(i in text for i in ids)
        assert any(line.startswith("Failed book_restaurant") for line in text.splitlines())
        # The lookups shrink to a count before the preference goes.
        if "I prefer aisle seats." in text:
            assert "search_hotels ×25" in text
    assert len(sizes) >= 3  # it degrades in steps
    assert render(state, language="en", max_tokens=count_tokens(full)) == full


def test_ledger_levels_keep_every_call_s_existence() -> None:
    state = merge(TaskState(), long_session())
    lab = LABELS["en"]
    for detail in Detail:
        text = "\n".join(line.text for line in ledger_lines(state.actions, lab, detail))
        assert "book_flight" in text and "search_hotels" in text and "book_restaurant" in text
        assert all(f"PNR{i:03d}" in text for i in range(15))
    minimal = [line.text for line in ledger_lines(state.actions, lab, Detail.MINIMAL)]
    assert "Looked up search_hotels ×25" in minimal
    assert "Done book_flight() → pnr=PNR000" in minimal


def test_compact_ledger_keeps_ids_but_clips_results() -> None:
    state = merge(TaskState(), long_session())
    lines = [line.text for line in ledger_lines(state.actions, LABELS["en"], Detail.COMPACT)]
    first = next(line for line in lines if "PNR000" in line)
    assert first == "Done book_flight(flight=TP200, seat=aisle) → pnr=PNR000"


def _call(tool: str, args: dict[str, object], summary: str, seq: int, **kw: object) -> ActionUnit:
    return ActionUnit(
        tool=tool,
        arguments=args,
        status=kw.get("status", "done"),  # type: ignore[arg-type]
        result_summary=summary,
        result_type="object",
        ref_paths=list(kw.get("refs", [])),  # type: ignore[call-overload]
        call_id=f"k{seq}",
        source_seqs=[seq, seq + 1],
    )


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_write_taken_back_later_says_so(language: str) -> None:
    units: list[Unit] = [
        _call("reserve_table", {"venue": "V-12"}, "hold_id=H-1001", 1, refs=["$.hold_id"]),
        _call("reserve_table", {"venue": "V-40"}, "hold_id=H-2002", 3, refs=["$.hold_id"]),
        _call("release_hold", {"hold_id": "H-1001"}, "status=released", 5),
    ]
    lines = render(merge(TaskState(), units), language=language).splitlines()
    [first] = [line for line in lines if "H-1001" in line and "reserve_table" in line]
    [second] = [line for line in lines if "H-2002" in line]
    taken_back = LABELS[language]["undone"].format(tool="release_hold")
    assert first.endswith(taken_back) and not second.endswith(taken_back)


def test_read_values_show_only_when_something_later_used_them() -> None:
    units = [
        _call("lookup_item", {"code": "QRX-551"}, "title=Lamp", 1),
        _call("lookup_item", {"code": "ZPT-778"}, "title=Desk", 3),
        _call(
            "place_order", {"item": "ZPT-778", "qty": 1}, "order_id=ORD-9", 5, refs=["$.order_id"]
        ),
    ]
    text = render(merge(TaskState(), units), language="en")
    assert "Looked up lookup_item ×2 (code=ZPT-778)" in text.splitlines()
    assert "QRX-551" not in text
    assert "Done place_order(item=ZPT-778, qty=1) → order_id=ORD-9" in text


@pytest.mark.parametrize(
    ("tool", "summary", "declared", "kind"),
    [
        ("cancel_booking", "", None, "write"),
        ("getUserProfile", "", None, "read"),
        ("search_catalog", "", None, "read"),
        ("order_samples", "", None, "write"),
        ("think", "", None, "read"),
        ("weather_forecast", "temp=12", None, "read"),
        ("permit_office", "status=approved", None, "write"),
        ("ticket_desk", "ticket_id=T-77", None, "write"),
        ("订票", "", None, "write"),
        ("查询余额", "", None, "read"),
        ("search_catalog", "", {"search_catalog": "write"}, "write"),
        ("cancel_booking", "", {"cancel_booking": "read"}, "read"),
    ],
)
def test_tool_kind_from_declaration_name_and_result(
    tool: str, summary: str, declared: dict[str, ToolKind] | None, kind: str
) -> None:
    refs = ["$.ticket_id"] if "ticket_id" in summary else []
    state = merge(TaskState(), [_call(tool, {}, summary, 1, refs=refs)])
    assert tool_kind(state.actions[0], declared) == kind

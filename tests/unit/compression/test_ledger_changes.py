"""Values a later write replaced on the same object are marked wherever they still stand."""

from __future__ import annotations

import pytest

from app.compression.ledger import Detail, ledger_lines, updated_values
from app.compression.merge import merge
from app.compression.render import LABELS, render
from app.compression.state import TaskState

from .helpers import call, extract, result, user


def _state(*turns):  # type: ignore[no-untyped-def]
    return merge(TaskState(), extract(list(turns)))


def test_an_update_of_the_object_a_write_made_replaces_its_values() -> None:
    state = _state(
        user(0, "Open a print job: 300 flyers, ready by 2026-03-14."),
        call(1, "c1", "create_print_job", {"copies": 300, "ready_by": "2026-03-14"}),
        result(2, "c1", {"job_id": "PJ-5521", "status": "created"}),
        call(3, "c2", "get_print_quote", {"copies": 300}),
        result(4, "c2", {"price": 41.0}),
        call(5, "c3", "update_print_job", {"job_id": "PJ-5521", "copies": 450}),
        result(6, "c3", {"job_id": "PJ-5521", "copies": 450, "status": "updated"}),
    )
    assert updated_values(state.actions) == [("copies", "300", "450")]
    text = render(state, language="en")
    lines = text.splitlines()
    lookup = next(line for line in lines if "get_print_quote" in line)
    assert "300" not in lookup or "now 450" in lookup
    # the goal still says 300: it is marked as replaced
    goal = next(line for line in lines if line.startswith("Goal:"))
    assert "copies is now 450" in goal
    # a write's own line is left as it was: the update's line follows it
    assert all("now 450" not in line for line in lines if line.startswith("Done"))


def test_a_changed_date_is_found_however_it_is_written() -> None:
    state = _state(
        user(0, "The mural must be finished by March 14."),
        call(1, "c1", "book_painter", {"due": "2026-03-14", "wall": "north"}),
        result(2, "c1", {"booking_id": "PB-77", "status": "booked"}),
        call(3, "c2", "reschedule_painter", {"booking_id": "PB-77", "due": "2026-03-21"}),
        result(4, "c2", {"booking_id": "PB-77", "status": "updated"}),
    )
    constraint = next(line for line in render(state).splitlines() if "mural" in line)
    assert "due is now 2026-03-21" in constraint


def test_two_writes_for_the_same_customer_change_nothing_of_each_other() -> None:
    state = _state(
        user(0, "Book two rooms for me, customer C-1180."),
        call(1, "c1", "book_room", {"customer_id": "C-1180", "room": "single"}),
        result(2, "c1", {"booking_id": "RB-1", "status": "booked"}),
        call(3, "c2", "book_room", {"customer_id": "C-1180", "room": "double"}),
        result(4, "c2", {"booking_id": "RB-2", "status": "booked"}),
    )
    assert updated_values(state.actions) == []
    assert "is now" not in render(state)


def test_a_lookup_keeps_the_id_it_obtained_but_a_search_lists_no_hits() -> None:
    state = _state(
        user(0, "Find my parcel, the sender wrote to pat@example.org."),
        call(1, "c1", "lookup_parcel", {"email": "pat@example.org"}),
        result(2, "c1", {"parcel_id": "PX-40912", "state": "in transit"}),
        call(3, "c2", "search_lockers", {"near": "Leith"}),
        result(4, "c2", {"lockers": [{"locker_id": "LK-1"}, {"locker_id": "LK-2"}]}),
    )
    lines = render(state).splitlines()
    parcel = next(line for line in lines if "lookup_parcel" in line)
    assert parcel.startswith("Looked up ") and parcel.endswith("→ parcel_id=PX-40912")
    lockers = next(line for line in lines if "search_lockers" in line)
    assert "LK-1" not in lockers and "LK-2" not in lockers


def _lookups_by_email() -> TaskState:
    turns = [user(0, "Three customers wrote in about late deliveries; find their parcels.")]
    for i, email in enumerate(("ana@example.org", "bo@example.org", "cy@example.org")):
        turns += [
            call(10 * i + 1, f"c{i}", "lookup_parcel", {"email": email}),
            result(10 * i + 2, f"c{i}", {"parcel_id": f"PX-{40912 + i}", "state": "late"}),
        ]
    return _state(*turns)


@pytest.mark.parametrize("detail", list(Detail), ids=lambda d: d.name)
def test_a_grouped_lookup_keeps_the_id_each_call_obtained(detail: Detail) -> None:
    lines = ledger_lines(_lookups_by_email().actions, LABELS["en"], detail)
    parcel = next(line.text for line in lines if "lookup_parcel" in line.text)
    assert all(f"PX-{40912 + i}" in parcel for i in range(3)), parcel


def test_a_grouped_lookup_keeps_the_newest_of_many_ids() -> None:
    turns = []
    for i in range(9):
        turns += [
            call(10 * i + 1, f"c{i}", "lookup_parcel", {"email": f"p{i}@example.org"}),
            result(10 * i + 2, f"c{i}", {"parcel_id": f"PX-{500 + i}", "state": "late"}),
        ]
    lines = ledger_lines(_state(*turns).actions, LABELS["en"], Detail.COMPACT)
    parcel = next(line.text for line in lines if "lookup_parcel" in line.text)
    assert parcel.endswith("→ parcel_id=PX-503|PX-504|PX-505|PX-506|PX-507|PX-508"), parcel


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_lookup_that_failed_once_then_succeeded_keeps_its_id_at_every_level(
    language: str,
) -> None:
    state = _state(
        user(0, "Pull last night's export from the vendor."),
        call(1, "c1", "fetch_export", {"path": "/exports/nightly.csv"}),
        result(2, "c1", {"status": "error", "message": "connection reset by peer"}),
        call(3, "c2", "fetch_export", {"path": "/exports/nightly.csv"}),
        result(4, "c2", {"file_id": "F-7731", "status": "ok", "rows": 1200}),
        call(5, "c3", "run_query", {"sql": "select count(*) from staging"}),
        result(6, "c3", {"rows": [[1200]]}),
    )
    for detail in Detail:
        lines = ledger_lines(state.actions, LABELS[language], detail)
        fetch = next(line.text for line in lines if "fetch_export" in line.text)
        assert fetch.startswith(LABELS[language]["read"]) and "F-7731" in fetch, (detail, fetch)

"""What a compression changed, item by item (app/compression/state_diff.py)."""

from __future__ import annotations

from typing import Any

import pytest

from app.compression.state_diff import Change, line_changes, state_changes


def item(key: str, text: str, **more: Any) -> dict[str, Any]:
    return {"key": key, "text": text, **more}


def param(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "name": key, "value": value, "source_seq": 1}


def action(key: str, status: str, result: str = "") -> dict[str, Any]:
    return {
        "key": key,
        "tool": "send_invoice",
        "arguments": {"to": "ACME"},
        "status": status,
        "result_summary": result,
        "seq": 3,
    }


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            {},
            {"constraints": [item("c1", "no flights before 9")]},
            [Change("constraints", "added", "no flights before 9")],
        ),
        (
            {"parameters": [param("budget", "300")]},
            {"parameters": [param("budget", "450")]},
            [Change("parameters", "changed", "budget = 450", "budget = 300")],
        ),
        (
            {"constraints": [item("c1", "window seat")]},
            {"constraints": [item("c1", "window seat", status="revoked")]},
            [Change("constraints", "superseded", "window seat")],
        ),
        (
            {"pending": [item("p1", "confirm the refund?")]},
            {"pending": [item("p1", "confirm the refund?", status="resolved", resolution="yes")]},
            [Change("pending", "resolved", "confirm the refund? → yes")],
        ),
        (
            {"todos": [item("t1", "call the hotel")]},
            {"todos": [item("t1", "call the hotel", status="done")]},
            [Change("todos", "resolved", "call the hotel")],
        ),
        (
            {"facts": [item("f1", "old fact")]},
            {"facts": []},
            [Change("facts", "dropped", "old fact")],
        ),
        (
            {"goal": item("g1", "plan a trip")},
            {"goal": item("g2", "cancel the trip")},
            [Change("goal", "changed", "cancel the trip", "plan a trip")],
        ),
        (
            {"actions": [action("a1", "failed")]},
            {"actions": [action("a1", "done", "#42")]},
            [
                Change(
                    "actions",
                    "changed",
                    'send_invoice(to="ACME") done: #42',
                    'send_invoice(to="ACME") failed',
                )
            ],
        ),
        ({"pending": [item("p1", "same")]}, {"pending": [item("p1", "same")]}, []),
    ],
    ids=[
        "added",
        "changed",
        "superseded",
        "resolved-pending",
        "resolved-todo",
        "dropped",
        "goal",
        "action-outcome",
        "unchanged",
    ],
)
def test_state_changes(old: dict[str, Any], new: dict[str, Any], expected: list[Change]) -> None:
    assert state_changes(old, new) == expected


def test_sections_are_reported_in_reading_order() -> None:
    new = {
        "facts": [item("f", "a fact")],
        "goal": item("g", "a goal"),
        "pending": [item("p", "a question?")],
    }
    assert [c.section for c in state_changes({}, new)] == ["goal", "pending", "facts"]


def test_an_item_that_is_not_an_object_is_ignored() -> None:
    assert state_changes({}, {"facts": ["loose string", item("f", "kept")]}) == [
        Change("facts", "added", "kept")
    ]


def test_long_texts_are_clipped() -> None:
    [change] = state_changes({}, {"facts": [item("f", "x" * 500)]})
    assert len(change.text) == 160 and change.text.endswith("…")


def test_renderings_compare_by_line() -> None:
    assert line_changes("Goal: a\nDone b", "Goal: a\nDone c") == [
        Change("rendering", "added", "Done c"),
        Change("rendering", "dropped", "Done b"),
    ]

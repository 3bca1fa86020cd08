"""Tool calls and results: pairing, status, summaries, artifacts."""

from __future__ import annotations

import json

import pytest

from app.compression.extract.tools import classify_result, parse_arguments
from app.compression.merge import merge
from app.compression.state import TaskState

from .helpers import call, extract, of_kind, result


def test_call_and_result_pair_by_id_into_a_done_action_with_artifacts() -> None:
    units = extract(
        [
            call(0, "call_1", "book_flight", {"flight": "TP204", "date": "2026-03-05"}),
            result(1, "call_1", {"pnr": "QX7T2L", "status": "confirmed", "price": 420}),
        ]
    )
    [action] = of_kind(units, "action")
    assert action.tool == "book_flight"
    assert action.arguments == {"flight": "TP204", "date": "2026-03-05"}
    assert (action.status, action.result_type, action.call_id) == ("done", "object", "call_1")
    assert action.ref_paths == ["$.pnr"]
    assert action.result_keys == ["pnr", "status", "price"]
    assert "pnr=QX7T2L" in action.result_summary and "status=confirmed" in action.result_summary
    assert action.source_seqs == [0, 1]
    assert [(a.artifact_kind, a.value, a.label) for a in of_kind(units, "artifact")] == [
        ("booking_ref", "QX7T2L", "pnr")
    ]


@pytest.mark.parametrize(
    "content",
    [
        {"error": "seat no longer available"},
        {"error": {"code": 409, "message": "conflict"}},
        {"status": "failed", "reason": "card declined"},
        {"status": "ERROR"},
        {"success": False, "message": "quota exceeded"},
        {"ok": False},
        {"status_code": 503, "detail": "upstream down"},
        {"errcode": 40001, "errmsg": "invalid credential"},
        'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad input',
        "Error: connection refused",
        "HTTP 404 Not Found",
        "PermissionError: [Errno 13] Permission denied: '/etc/shadow'",
        "request timed out after 30s",
        "调用失败：超时",
        "错误：余额不足",
    ],
)
def test_failures_are_detected(content: object) -> None:
    text = content if isinstance(content, str) else json.dumps(content)
    outcome = classify_result(text)
    assert (outcome.status, outcome.result_type) == ("failed", "error")
    units = extract([call(0, "c", "do_it", {}), result(1, "c", text)])
    [action] = of_kind(units, "action")
    assert action.status == "failed"
    assert of_kind(units, "artifact") == [], "a failed call produced nothing"


@pytest.mark.parametrize(
    ("content", "result_type"),
    [
        ({"status": "ok", "error": None}, "object"),
        ({"errors": []}, "object"),
        ({"status_code": 200}, "object"),
        ("0 errors found", "text"),
        ("No results found.", "text"),
        ([], "list"),
        ("", "empty"),
        ("42", "text"),
        ("true", "boolean"),
        ("null", "null"),
        ('{"cancelled": true, "status": "cancelled"}', "object"),
    ],
)
def test_successes_are_not_failures(content: object, result_type: str) -> None:
    text = content if isinstance(content, str) else json.dumps(content)
    outcome = classify_result(text)
    assert (outcome.status, outcome.result_type) == ("done", result_type)


def test_long_json_results_are_summarised_not_copied() -> None:
    hotels = [
        {"hotel_id": f"H{i}", "name": f"Hotel {i}", "price": 100 + i, "description": "x" * 500}
        for i in range(200)
    ]
    raw = json.dumps(hotels)
    units = extract([call(0, "c", "search_hotels", {"city": "Kyoto"}), result(1, "c", raw)])
    [action] = of_kind(units, "action")
    assert len(raw) > 100_000
    assert len(action.result_summary) <= 240
    assert action.result_summary.startswith("200 items; first: hotel_id=H0")
    assert action.result_type == "list"
    assert of_kind(units, "artifact") == [], "search hits are not artifacts"


def test_long_text_results_are_truncated_with_size() -> None:
    log = "\n".join(f"line {i}: processing shard {i}" for i in range(5000))
    units = extract([call(0, "c", "run_job", {"job": "etl"}), result(1, "c", log)])
    [action] = of_kind(units, "action")
    assert action.result_summary.startswith("line 0: processing shard 0")
    assert "5000 lines" in action.result_summary
    assert len(action.result_summary) < 240


def test_nested_ids_get_reference_paths_and_secrets_are_not_artifacts() -> None:
    payload = {
        "data": {"order": {"order_id": "ORD-9", "total": 12.5}},
        "items": list(range(30)),
        "card_number": "4111111111111111",
        "api_key": "sk-123",
    }
    outcome = classify_result(json.dumps(payload))
    assert outcome.ref_paths == ["$.data.order.order_id", "$.items"]
    assert [a.value for a in outcome.artifacts] == ["ORD-9"]
    assert "4111" not in outcome.summary and "sk-123" not in outcome.summary
    assert "items: 30 items" in outcome.summary


def test_paths_in_arguments_of_successful_writes_are_artifacts() -> None:
    units = extract(
        [
            call(0, "c", "write_file", {"path": "/out/report.pdf", "content": "..."}),
            result(1, "c", "ok"),
            call(2, "d", "create_table", {"table_name": "sales_2024"}),
            result(3, "d", {"created": True}),
        ]
    )
    assert {(a.artifact_kind, a.value) for a in of_kind(units, "artifact")} == {
        ("path", "/out/report.pdf"),
        ("table", "sales_2024"),
    }


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ('{"a": 1}', {"a": 1}),
        ("", {}),
        (None, {}),
        ("[1, 2]", {"_value": [1, 2]}),
        ("{not json", {"_raw": "{not json"}),
        ({"already": "dict"}, {"already": "dict"}),
    ],
)
def test_parse_arguments(raw: object, parsed: dict[str, object]) -> None:
    assert parse_arguments(raw) == parsed


def test_parallel_calls_in_one_turn_pair_with_their_own_results() -> None:
    from app.core.turns import TurnView

    turn = TurnView(
        seq=0,
        role="assistant",
        content=None,
        tool_calls=[
            {
                "id": "a",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"c": "X"}'},
            },
            {
                "id": "b",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"c": "Y"}'},
            },
        ],
    )
    units = extract([turn, result(1, "b", {"error": "unknown city"}), result(2, "a", {"t": 20})])
    statuses = {a.arguments["c"]: a.status for a in of_kind(units, "action")}
    assert statuses == {"X": "done", "Y": "failed"}


def test_call_without_result_is_unknown_and_orphan_result_is_kept() -> None:
    units = extract([call(0, "a", "send_email", {"to": "bob"}), result(1, "zzz", {"status": "ok"})])
    actions = {a.call_id: a for a in of_kind(units, "action")}
    assert actions["a"].status == "unknown"
    assert actions["zzz"].status == "done"


def test_repeated_identical_calls_are_one_ledger_entry_with_repeats() -> None:
    turns = []
    for i, outcome in enumerate([{"error": "timeout"}, {"error": "timeout"}, {"pnr": "AB12CD"}]):
        turns += [
            call(2 * i, f"c{i}", "book_flight", {"flight": "TP204"}),
            result(2 * i + 1, f"c{i}", outcome),
        ]
    state = merge(TaskState(), extract(turns))
    [action] = state.actions
    assert (action.status, action.repeats, len(action.attempts)) == ("done", 2, 3)
    assert [a.status for a in action.attempts] == ["failed", "failed", "done"]
    assert "AB12CD" in action.result_summary
    # Argument order does not make a call different.
    again = extract([call(10, "c9", "book_flight", '{"flight":  "TP204"}'), result(11, "c9", {})])
    assert merge(state, again).actions[0].repeats == 3

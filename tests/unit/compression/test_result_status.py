"""``result_status`` (the ingest trigger's bounded check) agrees with the full
``classify_result`` the compressor uses, and reads a long result only in part."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from app.compression.extract.tools import classify_result, result_status

SAMPLES = [
    None,
    "",
    "   ",
    "ok",
    "Error: connection refused",
    "Traceback (most recent call last):\n  File x\nValueError: bad",
    "HTTP 503 Service Unavailable",
    "请求失败，请稍后再试",
    json.dumps({"status": "confirmed", "pnr": "QX7T2L"}),
    json.dumps({"error": {"message": "seat taken"}}),
    json.dumps({"success": False, "message": "no"}),
    json.dumps({"errcode": 40001, "errmsg": "invalid"}),
    json.dumps({"status_code": 404, "detail": "missing"}),
    json.dumps([{"id": 1}, {"id": 2}]),
    "null",
    "true",
    "[" * 100_000 + "]" * 100_000,  # too deep for json: read as text, not a crash
    "x" + "\n" * 10_000 + "x",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["status", "error", "ok", "code", "message", "id", "state", "x"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)


def test_the_samples_agree() -> None:
    for content in SAMPLES:
        assert result_status(content) == classify_result(content).status, content


@given(json_values)
def test_json_results_agree(value: object) -> None:
    content = json.dumps(value)
    assert result_status(content) == classify_result(content).status


@given(st.text(max_size=300))
def test_text_results_agree(content: str) -> None:
    assert result_status(content) == classify_result(content).status


def test_a_long_result_is_judged_by_its_head_and_tail() -> None:
    middle = "fine line\n" * 10_000
    assert result_status("Error: disk full\n" + middle) == "failed"
    assert result_status(middle + "Traceback (most recent call last):\nOSError: x") == "failed"
    assert result_status(middle[:5000] + "\nError: in the middle\n" + middle) == "done"

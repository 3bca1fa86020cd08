"""The pure conversions of SDK message shapes (app/api/schemas.py), as tables."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.api.schemas import content_text, from_responses_items


@pytest.mark.parametrize(
    ("part", "line"),
    [
        ({"type": "text", "text": "a"}, "a"),
        ({"type": "input_text", "text": "b"}, "b"),
        ({"type": "output_text", "text": "c", "annotations": [], "logprobs": None}, "c"),
        ({"type": "refusal", "refusal": "no"}, "no"),
        (
            {"type": "image_url", "image_url": {"url": "https://h/i.png"}},
            "[image: https://h/i.png]",
        ),
        ({"type": "input_image", "file_id": "file-1"}, "[image: file-1]"),
        (
            {"type": "input_image", "image_url": "data:image/jpeg;base64,AAAA"},
            "[image: inline image/jpeg, 27 chars]",
        ),
        ({"type": "input_audio", "input_audio": {"data": "UklG", "format": "mp3"}}, "[audio: mp3]"),
        ({"type": "file", "file": {"file_data": "JVBER"}}, "[file: inline]"),
        ({"type": "input_file", "file_url": "https://h/r.pdf"}, "[file: https://h/r.pdf]"),
    ],
)
def test_each_part_becomes_one_line(part: dict[str, Any], line: str) -> None:
    assert content_text([{"type": "text", "text": "before"}, part]) == f"before\n{line}"


def test_plain_content_passes_untouched() -> None:
    assert content_text("hello") == "hello"
    assert content_text(None) is None


def test_an_unknown_part_names_its_index() -> None:
    with pytest.raises(ValidationError) as invalid:
        content_text([{"type": "text", "text": "ok"}, {"type": "hologram"}])
    assert [e["loc"] for e in invalid.value.errors()] == [(1,)]


def call(call_id: str, **extra: Any) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}", **extra}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "done"}


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [
        (m["role"], [c["id"] for c in m["tool_calls"]] if m.get("tool_calls") else m.get("content"))
        for m in messages
    ]


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        # consecutive calls: one assistant message
        (
            [call("a"), call("b"), output("a"), output("b")],
            [("assistant", ["a", "b"]), ("tool", "done"), ("tool", "done")],
        ),
        # a result in between: two calls, two messages
        (
            [call("a"), output("a"), call("b"), output("b")],
            [("assistant", ["a"]), ("tool", "done"), ("assistant", ["b"]), ("tool", "done")],
        ),
        # a chat message in between breaks the group too
        (
            [call("a"), {"role": "user", "content": "x"}, call("b")],
            [("assistant", ["a"]), ("user", "x"), ("assistant", ["b"])],
        ),
        # chat messages only: the list is not touched
        ([{"role": "user", "content": "x"}], [("user", "x")]),
    ],
)
def test_function_calls_group_as_chat_completions_pairs_them(
    items: list[dict[str, Any]], expected: list[tuple[str, Any]]
) -> None:
    assert shape(from_responses_items(items)) == expected


def test_null_fields_of_items_are_ignored_and_the_first_id_is_kept() -> None:
    (message,) = from_responses_items(
        [call("a", id="fc_1", status=None, caller=None), call("b", id="fc_2")]
    )
    assert message["id"] == "fc_1" and len(message["tool_calls"]) == 2

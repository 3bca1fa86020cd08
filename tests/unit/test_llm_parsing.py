"""Prompt building and reply validation of the LLM extractor: pure, no server."""

from __future__ import annotations

import json
import re

import pytest

from app.compression.extract.llm import (
    InvalidReply,
    build_messages,
    render_state,
    render_turns,
    validate_reply,
)
from app.compression.state import Constraint, HighStakes, Pending, TaskState, units_json_schema
from app.core.turns import TurnView

SEQS = {5, 6, 7}
CONSTRAINT = {"kind": "constraint", "text": "No shellfish", "source_seqs": [5]}


def reply(*units: dict) -> str:
    return json.dumps({"units": list(units)})


def test_every_worked_example_is_a_valid_reply_to_its_turns() -> None:
    messages = build_messages([TurnView(1, "user", "hi")], TaskState())
    examples = messages[1:-1]
    assert len(examples) >= 4
    for ask, answer in zip(examples[::2], examples[1::2], strict=True):
        assert (ask["role"], answer["role"]) == ("user", "assistant")
        seqs = {int(s) for s in re.findall(r"^\[seq (\d+)\]", ask["content"], re.MULTILINE)}
        assert seqs, ask["content"]
        validate_reply(answer["content"], seqs)  # raises if an example drifted from the schema


def test_examples_cover_both_languages_and_the_empty_reply() -> None:
    answers = [m["content"] for m in build_messages([], TaskState())[2:-1:2]]
    kinds = {u["kind"] for a in answers for u in json.loads(a)["units"]}
    assert {"constraint", "action", "parameter", "pending"} <= kinds
    assert any(json.loads(a) == {"units": []} for a in answers)
    assert any(re.search(r"[\u4e00-\u9fff]", a) for a in answers)


def test_valid_reply_parses() -> None:
    [unit] = validate_reply(reply(CONSTRAINT), SEQS)
    assert unit.kind == "constraint" and unit.text == "No shellfish"


def test_empty_units_is_a_valid_answer() -> None:
    assert validate_reply('{"units": []}', SEQS) == []


def test_code_fences_are_tolerated() -> None:
    assert len(validate_reply(f"```json\n{reply(CONSTRAINT)}\n```", SEQS)) == 1


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("not json", "not valid JSON"),
        ('{"units": [', "not valid JSON"),
        ("[]", "Input should be an object"),
        ('{"facts": []}', "units: Field required"),
        (reply({**CONSTRAINT, "source_seqs": [5, 8, 9]}), "source_seqs [8, 9] are not seqs"),
        (reply({**CONSTRAINT, "text": " \n"}), "units.0 (constraint): text is blank"),
        (reply({"kind": "nope", "source_seqs": [5]}), "units.0: Input tag 'nope'"),
        (reply({**CONSTRAINT, "source_seqs": ["5"]}), "units.0.constraint.source_seqs.0"),
        (reply({**CONSTRAINT, "source_seqs": [-1]}), "greater than or equal to 0"),
    ],
)
def test_invalid_replies_say_why(content: str, why: str) -> None:
    with pytest.raises(InvalidReply, match=re.escape(why)):
        validate_reply(content, SEQS)


def test_listing_of_allowed_seqs_is_compact() -> None:
    bad = reply({**CONSTRAINT, "source_seqs": [1]})
    with pytest.raises(InvalidReply, match=re.escape("(5..7)")):
        validate_reply(bad, SEQS)
    with pytest.raises(InvalidReply, match=re.escape("(5, 7)")):
        validate_reply(bad, {5, 7})


def test_turns_render_with_seqs_calls_and_truncated_results() -> None:
    call = {"id": "c9", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    turns = [
        TurnView(5, "user", "find it", emphasized=True),
        TurnView(6, "assistant", None, tool_calls=[call]),
        TurnView(7, "tool", "r" * 50, tool_call_id="c9"),
    ]
    text = render_turns(turns, tool_result_chars=20)
    assert text.splitlines() == [
        "[seq 5] user (emphasized): find it",
        "[seq 6] assistant:",
        "  -> call c9 lookup({})",
        f"[seq 7] tool result of c9 lookup: {'r' * 20}…[30 more chars]",
    ]


def test_state_renders_briefly() -> None:
    assert render_state(TaskState()) == "(empty)"
    state = TaskState(
        constraints=[
            Constraint(key="c:a", text="stay under $500"),
            Constraint(key="c:b", text="window seat", status="revoked"),
        ],
        pending=[Pending(key="p:a", text="Book JL5?")],
        high_stakes=[HighStakes(key="h:a", text="peanut allergy", category="allergy")],
    )
    text = render_state(state)
    assert "- stay under $500" in text and "window seat" not in text
    assert "open confirmations:\n- Book JL5?" in text
    assert "- allergy: peanut allergy" in text


def test_request_is_system_examples_then_turns() -> None:
    turns = [TurnView(5, "user", "hello there")]
    messages = build_messages(turns, TaskState())
    assert messages[0]["role"] == "system"
    schema = json.dumps(units_json_schema(), ensure_ascii=False, separators=(",", ":"))
    assert schema in messages[0]["content"]
    assert messages[-1] == {
        "role": "user",
        "content": "Current state:\n(empty)\n\nTurns:\n[seq 5] user: hello there",
    }

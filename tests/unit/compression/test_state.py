"""The unit contract (strict, schema-exported) and the state's JSON round trip."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from app.compression.merge import merge
from app.compression.state import (
    TaskState,
    dump_units,
    parse_units,
    units_json_schema,
)

from .helpers import call, extract, result, user


def test_schema_is_a_tagged_union_with_no_extra_fields() -> None:
    schema = units_json_schema()
    assert schema["required"] == ["units"]
    assert schema["additionalProperties"] is False
    items = schema["properties"]["units"]["items"]
    assert items["discriminator"]["propertyName"] == "kind"
    kinds = set(items["discriminator"]["mapping"])
    assert kinds == {
        "goal",
        "constraint",
        "action",
        "parameter",
        "artifact",
        "decision",
        "todo",
        "pending",
        "resolution",
        "revocation",
        "preference",
        "high_stakes",
        "blocker",
        "fact",
        "summary",
    }
    for definition in schema["$defs"].values():
        if "kind" in definition.get("properties", {}):
            assert definition["additionalProperties"] is False
            assert "source_seqs" in definition["required"]
    json.dumps(schema)  # serialisable as-is for an LLM request


def test_parse_units_accepts_valid_json_text_and_objects() -> None:
    payload = {
        "units": [
            {"kind": "constraint", "text": "Never fly Ryanair.", "source_seqs": [3]},
            {"kind": "parameter", "name": "lr", "value": "3e-4", "source_seqs": [4]},
            {
                "kind": "action",
                "tool": "book",
                "status": "done",
                "source_seqs": [5, 6],
                "at": "2026-03-05T10:00:00Z",
            },
        ]
    }
    units = parse_units(json.dumps(payload))
    assert [u.kind for u in units] == ["constraint", "parameter", "action"]
    assert parse_units(payload) == units
    assert parse_units({"units": dump_units(units)}) == units


@pytest.mark.parametrize(
    "unit",
    [
        {"kind": "constraint", "text": "x", "source_seqs": [1], "extra": 1},  # extra field
        {"kind": "constraint", "text": "", "source_seqs": [1]},  # empty text
        {"kind": "constraint", "text": "x", "source_seqs": []},  # no provenance
        {"kind": "constraint", "text": "x", "source_seqs": ["1"]},  # coerced int
        {"kind": "constraint", "text": "x", "source_seqs": [-1]},
        {"kind": "constraint", "text": "x", "source_seqs": [1], "emphasized": "yes"},
        {"kind": "gossip", "text": "x", "source_seqs": [1]},  # unknown kind
        {"kind": "parameter", "name": "lr", "source_seqs": [1]},  # missing value
        {"kind": "action", "tool": "t", "status": "maybe", "source_seqs": [1]},
        {"kind": "high_stakes", "text": "x", "category": "vibes", "source_seqs": [1]},
    ],
)
def test_invalid_units_are_rejected(unit: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        parse_units({"units": [unit]})


def test_state_round_trips_through_json() -> None:
    units = extract(
        [
            user(0, "Book a flight to Tokyo. Never book red-eye flights."),
            user(1, "把 batch size 改成 64"),
            call(2, "c1", "book_flight", {"flight": "TP204"}),
            result(3, "c1", {"pnr": "QX7T2L"}),
            user(4, "I'm allergic to peanuts."),
        ]
    )
    state = merge(TaskState(), units)
    stored = json.loads(json.dumps(state.model_dump(mode="json")))
    assert TaskState.model_validate(stored) == state
    # States written by a newer version (unknown keys) still load.
    assert TaskState.model_validate({**stored, "future_field": 1}) == state

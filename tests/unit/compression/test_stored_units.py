"""A live user turn's units as the worker stores them (``live_notes.units_record``) give
the context read the same notes as reading the turn's text: same lines, same order,
a later withdrawal applied, whether every turn, some or none has its record."""

from __future__ import annotations

import json
from itertools import product

import pytest

from app.compression.live import LiveTurn
from app.compression.live_notes import (
    RULES_STAMP,
    add_notes,
    any_carrier,
    notes_for,
    turn_units,
    units_record,
)
from app.compression.render import render
from app.core.turns import TurnView
from tests.unit.compression.helpers import assistant, user
from tests.unit.compression.test_live_notes import EN_OPENING, NEW_UNITS, _state

LATER = [
    user(4, "Never run the migration during business hours."),
    assistant(5, "Understood."),
    user(6, "My employee ID is E-448213."),
    user(7, "Scratch that, business hours are fine after all."),
    user(8, "Next, we still need to notify the finance team."),
    user(9, "Thanks."),
]


def _live(turns: list[TurnView], stored: tuple[bool, ...]) -> list[LiveTurn]:
    """``turns`` as the read hands them in; the user turns with ``stored`` set carry
    their record, the others none (not indexed yet)."""
    users = iter(stored)
    out = []
    for t in turns:
        keep = t.role == "user" and t.content is not None and next(users)
        record = units_record(t.content or "") if keep else None
        out.append(LiveTurn(t.seq, t.role, t.content, record))
    return out


@pytest.mark.parametrize(("opening", "said", "header"), NEW_UNITS)
def test_a_record_adds_what_the_text_adds(
    opening: list[TurnView], said: str, header: str | None
) -> None:
    before = render(_state(opening))
    later = [user(4, said), assistant(5, "OK.")]
    read = notes_for(before, _live(later, (False,)), {4})
    assert read  # the turn states something the state does not show
    assert notes_for(before, _live(later, (True,)), {4}) == read


@pytest.mark.parametrize("stored", list(product((False, True), repeat=5)))
def test_every_mix_of_stored_and_unread_turns_gives_the_same_state(
    stored: tuple[bool, ...],
) -> None:
    before = render(_state(EN_OPENING))
    left_out = {4, 5, 6, 7, 8}
    read = add_notes(before, notes_for(before, _live(LATER, (False,) * 5), left_out))
    assert "business hours" not in read  # withdrawn by turn 7, a placeholder resolved
    assert "E-448213" in read and "finance team" in read
    assert add_notes(before, notes_for(before, _live(LATER, stored), left_out)) == read
    assert any_carrier(_live(LATER, stored))


def test_a_record_is_the_text_s_units_and_empty_when_it_states_none() -> None:
    for t in LATER:
        record = units_record(t.content or "")
        assert len(json.loads(record)["units"]) == len(turn_units(t.content or ""))
    assert json.loads(units_record("Thanks.")) == {"rules": RULES_STAMP, "units": []}
    assert not any_carrier(_live([user(1, "Thanks."), user(2, "OK.")], (True, True)))

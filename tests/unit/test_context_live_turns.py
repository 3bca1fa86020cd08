"""The context read hands the live-turn readers (``compression/live.py``, ``live_notes``)
only the live user turns with a text: each of them reads a user turn's text and passes
over every other turn, so what they find is what they found among all the turns."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from app.compression.extract.rules import extract_units
from app.compression.live import LiveTurn, live_changes
from app.compression.live_notes import any_carrier, with_notes, withdraws
from app.compression.merge import merge
from app.compression.render import render
from app.compression.state import TaskState
from app.services.context import _live_turns
from tests.unit.compression.helpers import assistant, user

OPENING = [
    user(1, "We need to migrate the billing database to the new cluster."),
    user(2, "Set the replica count to 3. Never deploy on Fridays."),
    user(3, "Next step: back up the ledger tables."),
    assistant(4, "Noted."),
]
STATE = merge(TaskState(), extract_units(OPENING, TaskState()), through_seq=4)
RENDERED = render(STATE)
# Texts that state a rule, a change, a withdrawal, a next step, or nothing.
SAID = [
    "Always keep a read replica in each region.",
    "Set the replica count to 5.",
    "Forget the Friday rule.",
    "Scratch that.",
    "Next step: rotate the database credentials.",
    "My goal is now to retire the old cluster.",
    "Thanks, that looks fine.",
    "",
    None,
]
TURN = st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.sampled_from(SAID))


def test_the_read_keeps_the_user_turns_with_a_text_in_their_order() -> None:
    rows = [
        (9, "assistant", "Never deploy on Fridays.", None, None, None, 6, None),
        (8, "user", "Set the replica count to 5.", None, None, None, 8, '{"units": []}'),
        (7, "tool", "Always keep a replica.", None, "c-1", None, 5, None),
        (6, "user", "", None, None, None, 4, None),
        (5, "user", "Scratch that.", None, None, None, 4, None),
    ]
    older = [(3, "Forget the Friday rule.", None), (2, None, None)]

    async def read() -> list[LiveTurn]:
        return await _live_turns(None, rows, older, tenant="t", session_pk=1)

    assert asyncio.run(read()) == [
        LiveTurn(8, "user", "Set the replica count to 5.", '{"units": []}'),
        LiveTurn(5, "user", "Scratch that.", None),
        LiveTurn(3, "user", "Forget the Friday rule.", None),
    ]


@settings(max_examples=150, deadline=None)
@given(turns=st.lists(TURN, max_size=12), left=st.sets(st.integers(5, 16)))
def test_the_readers_find_the_same_among_the_user_turns_alone(
    turns: list[tuple[str, str | None]], left: set[int]
) -> None:
    every = [LiveTurn(seq, role, text) for seq, (role, text) in enumerate(turns, start=5)]
    users = [t for t in every if t.role == "user" and t.content]
    assert any_carrier(users) == any_carrier(every)
    assert withdraws(RENDERED, users) == withdraws(RENDERED, every)
    assert live_changes(RENDERED, users) == live_changes(RENDERED, every)
    for renderings in ([RENDERED], [""]):
        assert with_notes(renderings, users, left) == with_notes(renderings, every, left)

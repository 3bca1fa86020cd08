"""Restoring archived turns on a miss, pure: which turns hold what was needed, and how
they come back (pinned, naming their turn, once)."""

from __future__ import annotations

from app.compression.restore import is_question, reasks, relevant, restore
from app.compression.state import TaskState
from app.core.turns import TurnView
from app.memories.bm25 import index_terms

ARCHIVE = [
    TurnView(seq=1, role="user", content="Ship the parcel to the warehouse on Elm Road."),
    TurnView(seq=2, role="assistant", content="Which courier should I use?"),
    TurnView(seq=3, role="user", content="Use the courier with the green vans, Velox."),
    TurnView(seq=4, role="user", content="The warehouse gate opens at seven."),
]


def test_the_turns_holding_what_was_needed_best_first() -> None:
    found = relevant("which courier did I pick", ARCHIVE, index_terms)
    assert [f.seq for f in found] == [3, 2]
    assert relevant("the weather tomorrow", ARCHIVE, index_terms) == []
    # The newest of equally good turns first.
    assert [f.seq for f in relevant("warehouse", ARCHIVE, index_terms)] == [4, 1]


def test_restored_turns_are_pinned_once_with_their_turn() -> None:
    found = relevant("courier", ARCHIVE, index_terms, roles=("user",))
    state = restore(TaskState(), found, "en")
    [pinned] = state.high_stakes
    assert pinned.emphasized and pinned.source_seqs == [3]
    assert pinned.text.endswith("(restored from turn 3)") and "Velox" in pinned.text
    assert restore(state, found, "en") == state
    assert restore(TaskState(), found, "zh").high_stakes[0].text.endswith("（恢复自第 3 轮）")


def test_a_question_the_archive_answers_is_a_reask() -> None:
    asked = TurnView(seq=9, role="assistant", content="Remind me, which courier do you use?")
    small_talk = TurnView(seq=10, role="assistant", content="Anything else?")
    statement = TurnView(seq=11, role="assistant", content="The courier is booked.")
    assert is_question(asked) and not is_question(statement)
    [miss] = reasks([asked, small_talk, statement], ARCHIVE, index_terms)
    assert miss.question == asked
    # Only what the user said answers it, not the agent's own earlier question.
    assert [f.seq for f in miss.fragments] == [3]

"""The live state a read builds from the state of the turns before the newest one
(``live_notes._live_state``: that turn's units merged alone) is the state merged from
every live turn at once, whatever the turns say and however the live turns change
between reads (a new turn, a compaction taking the oldest, a record stored)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.compression import live_notes
from app.compression.live_notes import _fold, _live_state, units_record
from app.compression.state import TaskState

# What live user turns say: rules, pinned facts, next steps, open questions, a bare
# withdrawal (the latest rule or step said before it), a named one, and nothing.
SAID = (
    "Never run the migration during business hours.",
    "Always keep the audit log enabled.",
    "My employee ID is E-448213.",
    "Next, we still need to notify the finance team.",
    "We also need to update the runbook.",
    "Should we tell the on-call team first?",
    "Scratch that.",
    "Forget the rule about business hours.",
    "Actually, cancel the runbook update.",
    "Thanks, sounds good.",
    "迁移期间千万不要删除旧集群的数据。",
    "算了。",
)

# Between two reads: a new live turn (said, stored with its record or not), or a
# compaction taking the oldest live turns, or the worker storing a turn's record.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.sampled_from(SAID), st.booleans()),
        st.tuples(st.just("compact"), st.integers(1, 3), st.just(False)),
        st.tuples(st.just("store"), st.integers(0, 20), st.just(False)),
    ),
    min_size=1,
    max_size=14,
)


@pytest.fixture(autouse=True)
def _no_kept_states() -> Iterator[None]:
    live_notes._LIVE_STATES.clear()
    yield
    live_notes._LIVE_STATES.clear()


def _from_scratch(said: live_notes._Said, lang: str) -> TaskState:
    return _fold(TaskState(language="zh" if lang == "zh" else "en"), said, None)[0]


@settings(max_examples=150, deadline=None)
@given(steps=steps, lang=st.sampled_from(("en", "zh")))
def test_each_read_s_state_is_the_state_of_all_its_turns_merged_at_once(
    steps: list[tuple[str, object, bool]], lang: str
) -> None:
    live: list[tuple[int, str, str | None]] = []
    seq = 0
    for op, arg, stored in steps:
        if op == "turn":
            seq += 2  # an assistant reply between two user turns
            text = str(arg)
            live.append((seq, text, units_record(text) if stored else None))
        elif op == "compact":
            del live[: int(str(arg))]
        elif live:
            at = int(str(arg)) % len(live)
            s, text, _ = live[at]
            live[at] = (s, text, units_record(text))
        said = tuple(t for t in live if live_notes._units(t[1], t[2]))
        read = _live_state(said, lang)
        assert read.model_dump() == _from_scratch(said, lang).model_dump()
        # The read that follows, with nothing new, gets the same state again.
        assert _live_state(said, lang) is read


def test_a_bare_withdrawal_after_a_new_turn_retires_the_rule_of_the_turn_before() -> None:
    rule = (2, SAID[0], None)
    withdrawal = (4, "Scratch that.", None)
    first = _live_state((rule,), "en")
    assert [c.status for c in first.constraints] == ["active"]
    # Read from the state kept for ``(rule,)``: the latest rule said is carried over.
    then = _live_state((rule, withdrawal), "en")
    assert [c.status for c in then.constraints] != ["active"]
    assert then.model_dump() == _from_scratch((rule, withdrawal), "en").model_dump()


def test_the_states_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_notes, "LIVE_STATES_KEPT", 4)
    for i in range(10):
        _live_state(((2, f"Never deploy on day {i}.", None),), "en")
    assert len(live_notes._LIVE_STATES) == 4

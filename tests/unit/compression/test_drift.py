"""Topic drift against the goal: when it is watched, and what it decides."""

from __future__ import annotations

import pytest

from app.compression.triggers import DRIFT_THRESHOLD, goal_drift, watches_drift
from app.core.turns import TurnView

GOAL = "Plan a three-day walking tour of the old town"


def ask(text: str) -> TurnView:
    return TurnView(seq=20, role="user", content=text)


@pytest.mark.parametrize(
    ("goal", "turn_count", "live_turns", "watched"),
    [
        (GOAL, 8, 4, True),
        (None, 8, 4, False),  # no goal to compare with
        ("", 8, 4, False),
        (GOAL, 7, 4, False),  # too young to compress
        (GOAL, 8, 3, False),  # everything is inside the working window
    ],
)
def test_drift_is_watched_only_when_a_compression_could_follow(
    goal: str | None, turn_count: int, live_turns: int, watched: bool
) -> None:
    assert (
        watches_drift(
            goal=goal, turn_count=turn_count, live_turns=live_turns, min_turns=8, working_window=3
        )
        is watched
    )


def test_a_request_far_from_the_goal_is_drift() -> None:
    detail = goal_drift(GOAL, ask("What is a good recipe for lentil soup?"), lambda a, b: 0.02)
    assert detail is not None and f"{DRIFT_THRESHOLD:g}" in detail


def test_a_request_near_the_goal_is_not() -> None:
    assert goal_drift(GOAL, ask("Add a stop at the cathedral on day two"), lambda a, b: 0.4) is None


def test_a_short_reply_is_never_drift() -> None:
    assert goal_drift(GOAL, ask("ok"), lambda a, b: 0.0) is None

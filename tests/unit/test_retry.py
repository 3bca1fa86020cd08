from __future__ import annotations

import pytest

from app.core.retry import GiveUp, decide_retry


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "expected"),
    [
        (1, 5, 2.0),
        (2, 5, 4.0),
        (3, 5, 8.0),
        (4, 5, 16.0),
        (5, 5, GiveUp),
        (9, 5, GiveUp),
        (1, 1, GiveUp),
        (10, 20, 300.0),  # capped
    ],
)
def test_decide_retry(attempt: int, max_attempts: int, expected: object) -> None:
    decision = decide_retry(attempt=attempt, max_attempts=max_attempts, base_s=2.0, max_s=300.0)
    if expected is GiveUp:
        assert isinstance(decision, GiveUp) and str(max_attempts) in decision.reason
    else:
        assert decision == expected

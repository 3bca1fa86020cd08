"""When the API's full garbage collections run: between requests, or late under load."""

from __future__ import annotations

import pytest

from app.api.collector import IDLE_S, LATE_S, should_collect


@pytest.mark.parametrize(
    ("due_for", "in_flight", "quiet_for", "collect"),
    [
        (None, 0, 10.0, False),  # not due: never, however idle
        (0.0, 0, 2 * IDLE_S, True),  # due, nothing in flight for IDLE_S
        (0.0, 0, IDLE_S / 2, False),  # a request ended just now: another may follow
        (1.0, 1, 10.0, False),  # a request in flight would wait it out
        (LATE_S / 2, 8, 0.0, False),  # busy, not late yet
        (LATE_S, 8, 0.0, True),  # busy and late: collected anyway
    ],
)
def test_should_collect(
    due_for: float | None, in_flight: int, quiet_for: float, collect: bool
) -> None:
    now = 1000.0
    assert (
        should_collect(
            now=now,
            due_since=None if due_for is None else now - due_for,
            in_flight=in_flight,
            last_done=now - quiet_for,
        )
        is collect
    )

"""The Python client's retry decision: a pure function, as a table."""

from __future__ import annotations

import email.utils
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from mnemo_client._core import MAX_RETRY_AFTER_S, retry_delay

NOW = 1_700_000_000.0


def answer(status: int, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(status, headers=headers)


@pytest.mark.parametrize(
    ("attempt", "response", "idempotent", "delay"),
    [
        (1, answer(503, "2"), True, 2.0),  # the server's word
        (1, answer(503, "3600"), True, MAX_RETRY_AFTER_S),  # capped
        (1, answer(503, email.utils.formatdate(NOW + 5, usegmt=True)), True, 5.0),
        (1, answer(503, "soon"), True, 0.5),  # unreadable: backoff
        (3, answer(502), True, 2.0),  # backoff doubles per attempt
        (4, answer(503, "1"), True, None),  # out of retries
        (1, answer(500), True, None),  # a bug is not retried
        (1, answer(422), True, None),
        (1, answer(429, "1"), True, 1.0),  # stored nothing either
        (1, None, True, 0.5),  # no answer: resend an idempotent call
        (1, None, False, None),  # ...but not a memory post
    ],
)
def test_retry_delay(
    attempt: int, response: httpx.Response | None, idempotent: bool, delay: float | None
) -> None:
    got = retry_delay(attempt, 3, response, idempotent=idempotent, now=NOW)
    assert got == (pytest.approx(delay) if delay is not None else None)

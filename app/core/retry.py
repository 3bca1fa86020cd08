"""When a failed job runs again: a pure decision, tested by table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GiveUp:
    reason: str


def decide_retry(
    *, attempt: int, max_attempts: int, base_s: float = 2.0, max_s: float = 300.0
) -> float | GiveUp:
    """Seconds to wait before attempt ``attempt + 1``, or GiveUp (the job goes dead).

    Exponential backoff: base, 2·base, 4·base … capped at ``max_s``. ``attempt`` is
    the number of attempts already made (1 after the first failure).
    """
    if attempt >= max_attempts:
        return GiveUp(f"failed {attempt} time(s); max_attempts is {max_attempts}")
    return float(min(max_s, base_s * 2 ** (attempt - 1)))

"""Small filters the templates use to print numbers, times and JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def when(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(value: datetime | None, now: datetime | None = None) -> str:
    """'3 min ago', 'in 40 s' (lease expiries are in the future)."""
    if value is None:
        return "—"
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    return f"{duration(abs(seconds))} ago" if seconds >= 0 else f"in {duration(-seconds)}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def number(value: float | int | None) -> str:
    return "—" if value is None else f"{value:,}"


def pretty(value: Any) -> str:
    """JSON for a <pre>: a tool call's arguments are a JSON string, shown parsed."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # arguments are stored verbatim, JSON or not
            return str(value)
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True, default=str)


def saving(history: int, context: int) -> str:
    """What the context saves against the whole history, as a percentage."""
    if history <= 0:
        return "—"
    return f"{max(0.0, 1 - context / history):.0%}"


FILTERS: dict[str, Callable[..., str]] = {
    "when": when,
    "ago": ago,
    "duration": duration,
    "number": number,
    "pretty": pretty,
}
GLOBALS: dict[str, Callable[..., str]] = {"saving": saving}

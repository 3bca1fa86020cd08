"""Run the primary extractor (the LLM) and fall back to the rules when it fails.

A failed LLM is never mistaken for "nothing to extract": the rule extractor runs
instead, and the result says which extractor produced the units and why the
primary was abandoned, so the compression event can record it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.compression.extract.base import Extractor
from app.compression.state import TaskState, TurnView, Unit
from app.providers.llm import LLMError

log = logging.getLogger(__name__)


class ExtractionFailed(Exception):
    """An extractor gave up; ``reason`` is short and goes into the audit event."""

    def __init__(self, reason: str, *, attempts: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts


@runtime_checkable
class CountsAttempts(Protocol):
    """An extractor that can say how many model calls its answer took."""

    async def extract_counted(
        self, turns: Sequence[TurnView], state: TaskState
    ) -> tuple[list[Unit], int]: ...


@dataclass(frozen=True, slots=True)
class ExtractionResult:
    units: list[Unit]
    extractor: str  # name of the extractor whose units these are
    fallback_reason: str | None  # why the primary was abandoned; None if not
    attempts: int  # calls made to the primary (0 without one); the fallback runs once


async def extract_with_fallback(
    primary: Extractor | None,
    fallback: Extractor,
    turns: Sequence[TurnView],
    state: TaskState,
) -> ExtractionResult:
    if primary is None:
        units = await fallback.extract(turns, state)
        return ExtractionResult(units, fallback.name, None, 0)
    try:
        if isinstance(primary, CountsAttempts):
            units, attempts = await primary.extract_counted(turns, state)
        else:
            units, attempts = await primary.extract(turns, state), 1
        return ExtractionResult(units, primary.name, None, attempts)
    except ExtractionFailed as exc:
        reason, attempts = exc.reason, exc.attempts
    except LLMError as exc:
        reason, attempts = f"{primary.name}: {exc}", 1
    log.warning("extractor %s failed, using %s: %s", primary.name, fallback.name, reason)
    # An error in the fallback propagates: the job fails and is retried.
    units = await fallback.extract(turns, state)
    return ExtractionResult(units, fallback.name, reason, attempts)

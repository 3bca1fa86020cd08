"""Run the primary extractor (the LLM) and fall back to the rules when it fails.

A failed LLM is never mistaken for "nothing to extract": the rule extractor runs
instead, and the result says which extractor produced the units and why the
primary was abandoned, so the compression event can record it.

Whatever the extractor, its units pass ``admit_units`` before the merge: a unit
that fails its model is dropped and counted, never failing the job. A turn that
makes the rule extractor itself fail validation is left out (its units only), so
one poisoned turn cannot stop every later compression of its session.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from app.compression.extract.base import Extractor
from app.compression.state import TaskState, Unit, admit_units
from app.core.llm import LLMError
from app.core.turns import TurnView

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
    dropped: int = 0  # units that failed validation, plus turns left out for it


async def extract_with_fallback(
    primary: Extractor | None,
    fallback: Extractor,
    turns: Sequence[TurnView],
    state: TaskState,
) -> ExtractionResult:
    result = await _extract(primary, fallback, turns, state)
    units, dropped = admit_units(result.units)
    if dropped:
        log.warning("dropped %s unit(s) that failed validation", dropped)
    return ExtractionResult(
        units, result.extractor, result.fallback_reason, result.attempts, dropped + result.dropped
    )


async def _extract(
    primary: Extractor | None,
    fallback: Extractor,
    turns: Sequence[TurnView],
    state: TaskState,
) -> ExtractionResult:
    if primary is None:
        units, skipped = await _isolating(fallback, turns, state)
        return ExtractionResult(units, fallback.name, None, 0, skipped)
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
    # Any other error in the fallback propagates: the job fails and is retried.
    units, skipped = await _isolating(fallback, turns, state)
    return ExtractionResult(units, fallback.name, reason, attempts, skipped)


async def _isolating(
    extractor: Extractor, turns: Sequence[TurnView], state: TaskState
) -> tuple[list[Unit], int]:
    """The extractor's units, leaving out the turns on which it fails validation."""
    try:
        return await extractor.extract(turns, state), 0
    except ValidationError:
        pass
    poisoned = set()
    for turn in turns:
        try:
            await extractor.extract([turn], state)
        except ValidationError:
            poisoned.add(turn.seq)
    log.warning("left out turn(s) %s: their units fail validation", sorted(poisoned))
    rest = [turn for turn in turns if turn.seq not in poisoned]
    try:
        return await extractor.extract(rest, state), len(poisoned)
    except ValidationError:  # only in combination: give up on this slice's units
        return [], len(turns)

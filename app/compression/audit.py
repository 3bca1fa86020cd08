"""The audit record of a compression, as typed values (no I/O).

A compression job builds a ``CompressionRecord`` before its commit; the store
writes it beside the new state version and reads it back as an ``Event``
(``EventSummary`` in lists), with what only the commit knows: the event id, its
time, the state version it produced.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast, get_args

from app.compression.triggers import TriggerReason

TRIGGER_REASONS: frozenset[str] = frozenset(get_args(TriggerReason))


def as_trigger(value: str) -> TriggerReason:
    """``value`` as a trigger reason; a value no version of Mnemo writes is refused."""
    if value not in TRIGGER_REASONS:
        raise ValueError(f"unknown compression trigger {value!r}")
    return cast(TriggerReason, value)


@dataclass(frozen=True, slots=True)
class CompressionRecord:
    """What one compression did, before it is committed."""

    trigger: TriggerReason
    tier: int
    turn_ids: list[str]
    turn_seqs: list[int]
    input_tokens: int
    output_tokens: int
    ratio: float  # input / output tokens
    duration_ms: float
    extractor: str
    fallback_reason: str | None
    units: list[dict[str, Any]]  # the extracted units, JSON-ready
    rendered_state: str
    change_summary: str
    dropped_units: int  # failed validation; counted, noted in change_summary, not stored
    job_id: int | None
    # Tokens the LLM extractor's calls used, as the API reported them (None: no call).
    llm_prompt_tokens: int | None = None
    llm_completion_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class EventSummary:
    """A committed compression, as the list of a session's compressions shows it."""

    id: int
    created_at: datetime
    trigger: TriggerReason
    tier: int
    state_version: int
    turn_count: int
    input_tokens: int
    output_tokens: int
    ratio: float
    duration_ms: float
    extractor: str
    fallback_reason: str | None
    change_summary: str
    job_id: int | None
    llm_prompt_tokens: int | None  # what the LLM extractor's calls used; None: no call
    llm_completion_tokens: int | None


@dataclass(frozen=True, slots=True)
class Event(EventSummary):
    """One committed compression with its inputs, units and rendering."""

    turn_ids: list[str]
    turn_seqs: list[int]
    units: list[dict[str, Any]]
    rendered_state: str

"""The archived chat turn as the compressor, the triggers and the stores see it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class TurnView:
    """One archived chat turn as the compressor sees it (OpenAI message shape)."""

    seq: int
    role: str
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    emphasized: bool = False
    created_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

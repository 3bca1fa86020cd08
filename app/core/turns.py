"""A chat turn as the core sees it: posted and counted, and archived (``TurnView``)."""

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


@dataclass(frozen=True)
class PreparedTurn:
    """A validated message with its token count, ready to insert."""

    client_id: str | None
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    name: str | None
    tokens: int
    emphasized: bool
    metadata: dict[str, Any]
    created_at: datetime | None

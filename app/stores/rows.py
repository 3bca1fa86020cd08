"""Turning result rows into the plain values the core works on."""

from __future__ import annotations

from typing import Any

from app.core.turns import TurnView


def turn_view(row: Any) -> TurnView:
    """A turn row (any query selecting the turn's columns it has) as the core sees it."""
    mapping = row._mapping
    return TurnView(
        seq=row.seq,
        role=row.role,
        content=row.content,
        tool_calls=mapping.get("tool_calls"),
        tool_call_id=mapping.get("tool_call_id"),
        name=mapping.get("name"),
        emphasized=bool(mapping.get("emphasized", False)),
        created_at=mapping.get("created_at"),
        metadata=mapping.get("metadata") or {},
    )

"""Turning result rows into the plain values the core works on."""

from __future__ import annotations

import json
from typing import Any

from app.core.turns import TurnView


def json_value(value: Any) -> Any:
    """A JSON column's value: decoded already by some connections, a string on others."""
    return json.loads(value) if isinstance(value, str) else value


def turn_view(row: Any) -> TurnView:
    """A turn row (any query selecting the turn's columns it has) as the core sees it."""
    mapping = row._mapping
    return TurnView(
        seq=row.seq,
        role=row.role,
        content=row.content,
        tool_calls=json_value(mapping.get("tool_calls")),
        tool_call_id=mapping.get("tool_call_id"),
        name=mapping.get("name"),
        emphasized=bool(mapping.get("emphasized", False)),
        created_at=mapping.get("created_at"),
        metadata=json_value(mapping.get("metadata")) or {},
    )

"""Small builders for turns, shared by the compression tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.compression.extract.rules import extract_units
from app.compression.state import TaskState, Unit
from app.core.turns import TurnView


def user(seq: int, content: str, **kw: Any) -> TurnView:
    return TurnView(seq=seq, role="user", content=content, **kw)


def assistant(seq: int, content: str | None, **kw: Any) -> TurnView:
    return TurnView(seq=seq, role="assistant", content=content, **kw)


def system(seq: int, content: str) -> TurnView:
    return TurnView(seq=seq, role="system", content=content)


def call(seq: int, call_id: str, name: str, args: dict[str, Any] | str) -> TurnView:
    raw = args if isinstance(args, str) else json.dumps(args)
    return TurnView(
        seq=seq,
        role="assistant",
        content=None,
        tool_calls=[
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}
        ],
    )


def result(seq: int, call_id: str, content: Any) -> TurnView:
    text = content if isinstance(content, str) else json.dumps(content)
    return TurnView(seq=seq, role="tool", tool_call_id=call_id, content=text)


def extract(turns: Sequence[TurnView], state: TaskState | None = None) -> list[Unit]:
    return extract_units(turns, state or TaskState())


def kinds(units: Sequence[Unit]) -> list[str]:
    return [u.kind for u in units]


def of_kind(units: Sequence[Unit], kind: str) -> list[Any]:
    return [u for u in units if u.kind == kind]


def texts(units: Sequence[Unit], kind: str) -> list[str]:
    return [u.text for u in of_kind(units, kind)]

"""Clip values to the limits a pydantic model declares on its own fields.

Text an extractor copies out of turns (a pre-signed URL, a 256-character tool
name, a long e-mail address or path, the arguments of a call) can be longer than
the model that carries it allows. Failing validation then fails the compression
job, and every later one of the session on the same turn. So models that hold
extracted text clip their input first, in one place, from the limits they
declare themselves (``max_length`` on a field or on its items, ``JsonBudget`` on a
JSON field): no copied numbers to drift apart.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from annotated_types import MaxLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo

ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class JsonBudget:
    """Marker on a JSON field: how much of a JSON value is kept."""

    chars: int = 500  # characters of each string (keys included)
    items: int = 50  # entries of each object or array
    depth: int = 8  # containers deeper than this become "…"


def clip_text(value: str, limit: int) -> str:
    """``value`` cut to at most ``limit`` characters, marked with an ellipsis when cut."""
    if len(value) <= limit:
        return value
    return value[: max(limit - 1, 0)] + ELLIPSIS if limit > 0 else ""


def clip_json(value: Any, budget: JsonBudget, depth: int = 0) -> Any:
    """A JSON value within ``budget``; NUL (which JSONB cannot hold) removed from strings."""
    if isinstance(value, str):
        return clip_text(value.replace("\x00", ""), budget.chars)
    if not isinstance(value, dict | list):
        return value
    if depth >= budget.depth:
        return ELLIPSIS
    if isinstance(value, dict):
        return {
            clip_text(str(k).replace("\x00", ""), budget.chars): clip_json(v, budget, depth + 1)
            for k, v in list(value.items())[: budget.items]
        }
    return [clip_json(v, budget, depth + 1) for v in value[: budget.items]]


def _max_len(metadata: list[Any]) -> int | None:
    for m in metadata:
        if isinstance(m, MaxLen):
            return m.max_length
        if isinstance(m, FieldInfo) and (inner := _max_len(m.metadata)) is not None:
            return inner
    return None


def _item_max_len(field: FieldInfo) -> int | None:
    """``max_length`` of the items of a ``list[Annotated[str, …]]`` field."""
    args = typing.get_args(field.annotation)
    if len(args) == 1 and typing.get_origin(args[0]) is typing.Annotated:
        return _max_len(list(typing.get_args(args[0])[1:]))
    return None


def clip_fields(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every field of ``model`` clipped to the model's declared limits."""
    out = dict(data)
    for name, field in model.model_fields.items():
        value = out.get(name)
        limit = _max_len(field.metadata)
        budget = next((m for m in field.metadata if isinstance(m, JsonBudget)), None)
        if budget is not None and isinstance(value, dict | list):
            out[name] = clip_json(value, budget)
        elif isinstance(value, str) and limit is not None:
            out[name] = clip_text(value, limit)
        elif isinstance(value, list):
            items = _item_max_len(field)
            kept = value[:limit] if limit is not None else value
            if items is not None:
                kept = [clip_text(v, items) if isinstance(v, str) else v for v in kept]
            out[name] = kept
    return out

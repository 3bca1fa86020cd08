"""What one compression changed in the task state, item by item, for a reader.

Pure: two states as stored (JSON objects, so states of older schema versions still
compare) in, a list of changes out. Items are matched by their ``key``; a change is

- ``added``: an item the old state did not have;
- ``changed``: the same item with another value (``was`` → ``text``): a parameter's
  value, the goal, an action's outcome;
- ``superseded``: a constraint or note revoked;
- ``resolved``: a pending confirmation answered, a todo finished;
- ``dropped``: an item the new state no longer holds (decayed or merged away).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.compression.text import clip

ChangeKind = Literal["added", "changed", "superseded", "resolved", "dropped"]

Json = Mapping[str, Any]

# Sections of the state in the order a reader scans them.
SECTIONS = (
    "goal",
    "constraints",
    "pending",
    "high_stakes",
    "actions",
    "parameters",
    "artifacts",
    "decisions",
    "todos",
    "preferences",
    "blockers",
    "facts",
)

# A status that, once reached, closes an item: (section, status) → change kind.
CLOSING = {
    ("pending", "resolved"): "resolved",
    ("todos", "done"): "resolved",
    ("todos", "cancelled"): "resolved",
    ("constraints", "revoked"): "superseded",
    ("decisions", "revoked"): "superseded",
    ("preferences", "revoked"): "superseded",
    ("blockers", "revoked"): "superseded",
    ("facts", "revoked"): "superseded",
}


@dataclass(frozen=True)
class Change:
    section: str
    kind: ChangeKind
    text: str
    was: str | None = None


# How much of an item a change shows.
SHOWN_CHARS = 160


def _clip(text: str, limit: int = SHOWN_CHARS) -> str:
    return clip(text, limit)


def _action(item: Json) -> str:
    args = item.get("arguments") or {}
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    result = item.get("result_summary") or ""
    line = f"{item.get('tool', '?')}({_clip(shown, 80)}) {item.get('status', '')}".rstrip()
    return f"{line}: {_clip(result, 80)}" if result else line


def _value(section: str, item: Json) -> str:
    """The part of an item a reader compares."""
    if section == "actions":
        return _action(item)
    if section == "parameters":
        return f"{item.get('name', item.get('key', '?'))} = {item.get('value', '')}"
    if section == "artifacts":
        label = item.get("label")
        return f"{label}: {item.get('value', '')}" if label else str(item.get("value", ""))
    text = str(item.get("text", ""))
    if section == "pending" and item.get("resolution"):
        return f"{text} → {item['resolution']}"
    return text


def _by_key(items: Any) -> dict[str, Json]:
    if isinstance(items, Mapping):  # the goal: one item, not a list
        items = [items]
    if not isinstance(items, list):
        return {}
    return {str(i.get("key", n)): i for n, i in enumerate(items) if isinstance(i, Mapping)}


def _section_changes(section: str, old: Any, new: Any) -> list[Change]:
    before, after = _by_key(old), _by_key(new)
    out: list[Change] = []
    for key, item in after.items():
        text = _clip(_value(section, item))
        prior = before.get(key)
        if prior is None:
            if section == "goal" and before:  # a new goal replaces the old one
                was = _clip(_value(section, next(iter(before.values()))))
                out.append(Change(section, "changed", text, was))
            else:
                out.append(Change(section, "added", text))
            continue
        status, prior_status = item.get("status"), prior.get("status")
        closing = CLOSING.get((section, str(status)))
        if closing is not None and status != prior_status:
            out.append(Change(section, closing, text))  # type: ignore[arg-type]
        elif _value(section, prior) != _value(section, item):
            out.append(Change(section, "changed", text, _clip(_value(section, prior))))
    replaced_goal = section == "goal" and after
    if not replaced_goal:
        out.extend(
            Change(section, "dropped", _clip(_value(section, item)))
            for key, item in before.items()
            if key not in after
        )
    return out


def state_changes(old: Json, new: Json) -> list[Change]:
    """Every change from ``old`` to ``new``, section by section (see the module doc)."""
    return [c for s in SECTIONS for c in _section_changes(s, old.get(s), new.get(s))]


def line_changes(old: str, new: str) -> list[Change]:
    """The same, from two renderings only (events stored before states were): lines
    added and dropped."""
    before, after = old.splitlines(), new.splitlines()
    old_set, new_set = set(before), set(after)
    return [Change("rendering", "added", line) for line in after if line not in old_set] + [
        Change("rendering", "dropped", line) for line in before if line not in new_set
    ]

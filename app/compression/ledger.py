"""The action ledger as prompt lines, at four levels of detail.

Every tool call an agent made stays in the state: an agent that no longer sees
a call repeats it, which is the failure Mnemo exists to prevent. So a long
ledger is *compressed*, never cut: ``render`` asks for less detail until the
state fits its budget.

* ``FULL`` — one line per call: ``Done tool(args) → result``.
* ``GROUPED`` — the newest calls in full; older successful calls of the same
  tool on one line, each call reduced to the arguments that tell it apart and
  the ids its result produced::

      Done book_flight ×3 (pax=1; flight → pnr): TP200 → UT87HV; TP203 → 8E4MCF
      Done search_hotels ×7 (area=Shinjuku; max_price=180|250|300; last → results: 12 items)

* ``COMPACT`` — every call grouped by tool, ids only; failures clipped.
* ``MINIMAL`` — which tools were called, how often: existence without detail.

Every line still starts with its status marker ("Done", "Failed", "Called").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from app.compression.state import Action
from app.compression.text import clip

# Up to this many calls, every one gets its own line even with no budget pressure.
FULL_LEDGER_CALLS = 12
# In a grouped ledger, the newest calls keep their own line.
RECENT_CALLS = 6
_MAX_VALUES = 6  # distinct values listed per varying argument
_FIELD = re.compile(r"^(?P<key>[^=,:]{1,60})=")
_PATH_STEP = re.compile(r"[.\[]")  # "$.booking.pnr" → "$", "booking", "pnr"


class Detail(IntEnum):
    FULL = 0
    GROUPED = 1
    COMPACT = 2
    MINIMAL = 3


@dataclass(frozen=True, slots=True)
class LedgerLine:
    text: str
    seq: int


def _fmt_value(value: Any, limit: int = 32) -> str:
    if isinstance(value, str):
        return clip(value, limit)
    return clip(json.dumps(value, ensure_ascii=False), limit)


def _pairs(arguments: Mapping[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(f"{k}={_fmt_value(arguments[k])}" for k in keys if k in arguments)


def format_call(action: Action, limit: int = 160) -> str:
    args = list(action.arguments.items())
    shown = ", ".join(f"{k}={_fmt_value(v)}" for k, v in args[:5])
    if len(args) > 5:
        shown += ", …"
    return f"{action.tool}({clip(shown, limit)})"


def refs(action: Action) -> list[str]:
    """The ``key=value`` parts of the result summary that are ids or locations."""
    keys = {_PATH_STEP.split(path)[-1] for path in action.ref_paths}
    found = []
    for part in action.result_summary.split(", "):
        m = _FIELD.match(part)
        if m is not None and m["key"] in keys:
            found.append(part)
    return found


def _marker(action: Action, lab: Mapping[str, str]) -> str:
    return {"done": lab["done"], "failed": lab["failed"], "unknown": lab["called"]}[action.status]


def full_line(action: Action, lab: Mapping[str, str]) -> str:
    summary = action.result_summary if action.status != "unknown" else lab["no_result"]
    text = f"{_marker(action, lab)} {format_call(action)}"
    if summary:
        text += f" → {summary}"
    if action.repeats:
        extra = [lab["calls"].format(n=len(action.attempts))]
        failures = sum(1 for a in action.attempts if a.status == "failed")
        if failures and action.status == "done":
            extra.append(lab["failures"].format(n=failures))
        text += f" ({lab['sep'].join(extra)})"
    return text


def compact_line(action: Action, lab: Mapping[str, str]) -> str:
    """One call in little space: clipped arguments, its ids or a clipped outcome."""
    found = refs(action) if action.status == "done" else []
    outcome = ", ".join(found) if found else clip(action.result_summary, 80)
    if action.status == "unknown":
        outcome = lab["no_result"]
    text = f"{_marker(action, lab)} {format_call(action, 60)}"
    return f"{text} → {outcome}" if outcome else text


def _split_args(actions: Sequence[Action]) -> tuple[list[str], list[str]]:
    """(keys with one value across the calls, keys whose value differs), in first-seen order."""
    keys: dict[str, None] = {}
    for action in actions:
        keys.update(dict.fromkeys(action.arguments))
    common: list[str] = []
    varying: list[str] = []
    missing = object()
    for key in keys:
        values = {json.dumps(a.arguments.get(key, missing), default=str) for a in actions}
        (common if len(values) == 1 else varying).append(key)
    return common, varying


def _value_sets(actions: Sequence[Action], keys: Sequence[str]) -> list[str]:
    out = []
    for key in keys:
        values = list(
            dict.fromkeys(_fmt_value(a.arguments[key], 24) for a in actions if key in a.arguments)
        )
        shown = "|".join(values[:_MAX_VALUES]) + ("|…" if len(values) > _MAX_VALUES else "")
        out.append(f"{key}={shown}")
    return out


def _split_ref(part: str) -> tuple[str, str]:
    key, _, value = part.partition("=")
    return key, value


def _entries(
    with_refs: Sequence[tuple[Action, list[str]]], varying: Sequence[str], detail: Detail
) -> tuple[str | None, list[str]]:
    """(column header, one entry per call): ``("flight → pnr", ["TP200 → UT87HV", …])``.

    When every call has the same arguments and ids, the names go once in the
    header; otherwise each entry names its own (``flight=TP200 → pnr=UT87HV``).
    """
    args = list(varying) if detail < Detail.COMPACT else []
    shown = [found if detail < Detail.COMPACT else found[:1] for _, found in with_refs]
    ref_keys = [[_split_ref(p)[0] for p in found] for found in shown]
    same_shape = all(keys == ref_keys[0] for keys in ref_keys) and all(
        k in action.arguments for action, _ in with_refs for k in args
    )
    if not same_shape:
        entries = []
        for (action, _), found in zip(with_refs, shown, strict=True):
            pairs = _pairs(action.arguments, args)
            ids = ", ".join(found)
            entries.append(f"{pairs} → {ids}" if pairs else ids)
        return None, entries
    header = ", ".join(ref_keys[0])
    if args:
        header = f"{', '.join(args)} → {header}"
    entries = []
    for (action, _), found in zip(with_refs, shown, strict=True):
        ids = ", ".join(_split_ref(p)[1] for p in found)
        values = ", ".join(_fmt_value(action.arguments[k]) for k in args)
        entries.append(f"{values} → {ids}" if values else ids)
    return header, entries


def group_line(tool: str, actions: Sequence[Action], lab: Mapping[str, str], detail: Detail) -> str:
    """Successful calls of one tool on one line, each told apart by its arguments and ids."""
    actions = sorted(actions, key=lambda a: a.seq)
    common, varying = _split_args(actions)
    head = f"{lab['done']} {tool} ×{len(actions)}"
    with_refs = [(a, found) for a in actions if (found := refs(a))]
    without = [a for a in actions if not refs(a)]
    context = [_pairs(actions[0].arguments, common)] if common and detail < Detail.COMPACT else []
    if with_refs:
        header, entries = _entries(with_refs, varying, detail)
        if header:
            context.append(header)
        if without and detail < Detail.COMPACT:
            entries.extend(_value_sets(without, varying))
        suffix = f" ({'; '.join(context)})" if context else ""
        return f"{head}{suffix}: {'; '.join(entries)}"
    if detail < Detail.COMPACT:
        context.extend(_value_sets(actions, varying))
        last = actions[-1].result_summary
        if last:
            context.append(lab["last"].format(text=clip(last, 60)))
    return f"{head} ({'; '.join(context)})" if context else head


def _grouped(
    actions: Sequence[Action], lab: Mapping[str, str], detail: Detail, recent: int
) -> list[LedgerLine]:
    ordered = sorted(actions, key=lambda a: a.seq)
    newest: list[Action] = []
    if detail == Detail.GROUPED:
        # Repeated lookups (calls that produced no id) fold into their tool's group
        # even when recent; the last call of each tool keeps its own line.
        last_lookup = {a.tool: a for a in ordered if a.status == "done" and not refs(a)}
        newest = [
            a
            for a in ordered[max(0, len(ordered) - recent) :]
            if a.status != "done" or refs(a) or last_lookup[a.tool] is a
        ]
    kept = {id(a) for a in newest}
    older = [a for a in ordered if id(a) not in kept]
    lines = [LedgerLine(full_line(a, lab), a.seq) for a in newest]
    by_tool: dict[str, list[Action]] = {}
    for action in older:
        if action.status == "done":
            by_tool.setdefault(action.tool, []).append(action)
        elif detail == Detail.GROUPED:
            lines.append(LedgerLine(full_line(action, lab), action.seq))
        else:
            lines.append(LedgerLine(compact_line(action, lab), action.seq))
    for tool, group in by_tool.items():
        seq = max(a.seq for a in group)
        if len(group) == 1:
            single = full_line if detail == Detail.GROUPED else compact_line
            lines.append(LedgerLine(single(group[0], lab), seq))
        else:
            lines.append(LedgerLine(group_line(tool, group, lab, detail), seq))
    return sorted(lines, key=lambda line: line.seq)


def _minimal(actions: Sequence[Action], lab: Mapping[str, str]) -> list[LedgerLine]:
    lines = []
    for status, marker in (("done", "done"), ("failed", "failed"), ("unknown", "called")):
        chosen = [a for a in actions if a.status == status]
        if not chosen:
            continue
        counts: dict[str, int] = {}
        for action in chosen:
            counts[action.tool] = counts.get(action.tool, 0) + 1
        tools = lab["sep"].join(f"{tool} ×{n}" if n > 1 else tool for tool, n in counts.items())
        lines.append(LedgerLine(f"{lab[marker]} {tools}", max(a.seq for a in chosen)))
    return sorted(lines, key=lambda line: line.seq)


def ledger_lines(
    actions: Sequence[Action],
    lab: Mapping[str, str],
    detail: Detail,
    *,
    recent: int = RECENT_CALLS,
) -> list[LedgerLine]:
    """The ledger at ``detail``, oldest first (a group sits where its newest call was)."""
    if detail == Detail.FULL:
        return [LedgerLine(full_line(a, lab), a.seq) for a in sorted(actions, key=lambda a: a.seq)]
    if detail == Detail.MINIMAL:
        return _minimal(actions, lab)
    return _grouped(actions, lab, detail, recent)

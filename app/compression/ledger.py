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

At every level a lookup keeps the ids its calls obtained (an order found by
email, an export's file id), each call's own: like a write's ids, they are what
the agent would otherwise have to fetch again.

Every line still starts with its status marker ("Done", "Failed", "Called").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

from app.compression.state import Action, ActionUnit
from app.compression.text import clip

# Up to this many calls, every one gets its own line even with no budget pressure.
FULL_LEDGER_CALLS = 12
# In a grouped ledger, the newest calls keep their own line.
RECENT_CALLS = 6
_MAX_VALUES = 6  # distinct values listed per varying argument
_FIELD = re.compile(r"^(?P<key>[^=,:]{1,60})=")
_PATH_STEP = re.compile(r"[.\[]")  # "$.booking.pnr" → "$", "booking", "pnr"
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NOT_LETTERS = re.compile(r"[^a-z]++")
# An argument naming the thing a call acts on.
_ID_KEY = re.compile(r"(?:^|_)(?:id|ids|ref|reference|number|no|code|pnr|key)$", re.IGNORECASE)
# Tools that take back an earlier write naming the same id.
_UNDO = re.compile(
    r"cancel|release|delete|remove|revoke|void|refund|withdraw|undo|rollback|unbook|"
    r"取消|释放|撤销|删除|退",
    re.IGNORECASE,
)

ToolKind = Literal["read", "write"]
# Whether a value (an argument of a read-only call) was used by anything later.
Used = Callable[[str], bool]

# A tool's first verb tells whether it changes the world. Deployments name
# their own tools either way (``Settings.write_tools`` / ``read_tools``).
_WRITE_VERBS = frozenset(
    """book cancel update create delete remove send submit pay deploy order reserve release
    register apply schedule set add post put patch modify change confirm approve reject
    transfer refund return upload write insert save assign close start stop restart rollback
    merge publish issue charge purchase buy sign enroll invite hold lock unlock grant revoke
    attach archive move rename mark edit commit push migrate provision scale trigger file
    request rebook exchange upgrade downgrade void withdraw enable disable install uninstall
    execute kill terminate drop reset escalate notify email message reply share block
    unblock subscribe unsubscribe renew extend open complete claim redeem allocate dispatch
    ship print link unlink import export rotate revert resolve accept decline train build
    fit generate backup restore sync reschedule bind unbind""".split()
)
_READ_VERBS = frozenset(
    """get list search find query fetch lookup look read check calculate calc compute think
    view show describe browse count estimate quote validate preview compare inspect stats
    status track verify retrieve load scan explore analyze analyse summarize summarise
    recommend suggest translate convert format parse diff ping lint test""".split()
)
_ZH_WRITE = re.compile(
    r"订|预约|预定|取消|更新|创建|新建|删除|提交|发送|支付|修改|释放|退|申请|登记|下单"
)
_ZH_READ = re.compile(r"查|搜|获取|列出|看|计算|统计")
_CHANGED = re.compile(
    r"\bstatus=(?:booked|confirmed|cancell?ed|created|updated|placed|submitted|sent|scheduled|"
    r"approved|paid|refunded|deleted|released)\b|\b(?:updated|created|deleted)=true\b",
    re.IGNORECASE,
)


def tool_kind(
    action: Action | ActionUnit, declared: Mapping[str, ToolKind] | None = None
) -> ToolKind:
    """ "write" when the call changes the world (book, cancel, send…), else "read".

    The deployment's declaration wins; then the tool name's first verb; then the
    result (a status saying something was booked, updated…, or an id it was not
    given); anything else is a read.
    """
    if declared and action.tool in declared:
        return declared[action.tool]
    words = _CAMEL.sub(r"\1_\2", action.tool).casefold()
    for word in _NOT_LETTERS.split(words):
        if word in _WRITE_VERBS:
            return "write"
        if word in _READ_VERBS:
            return "read"
    if _ZH_WRITE.search(action.tool):
        return "write"
    if _ZH_READ.search(action.tool):
        return "read"
    if _CHANGED.search(action.result_summary):
        return "write"
    # A call that produced an id it was not given made something.
    given = set(_values(action.arguments))
    produced = [_split_ref(part)[1] for part in refs(action)]
    return "write" if any(v not in given for v in produced) else "read"


class Detail(IntEnum):
    FULL = 0
    GROUPED = 1
    COMPACT = 2
    MINIMAL = 3


@dataclass(frozen=True, slots=True)
class LedgerLine:
    text: str
    seq: int
    write: bool = False


def _fmt_value(value: Any, limit: int = 32) -> str:
    if isinstance(value, str):
        return clip(value, limit)
    return clip(json.dumps(value, ensure_ascii=False), limit)


def format_call(action: Action, limit: int = 160) -> str:
    args = list(action.arguments.items())
    shown = ", ".join(f"{k}={_fmt_value(v)}" for k, v in args[:5])
    if len(args) > 5:
        shown += ", …"
    return f"{action.tool}({clip(shown, limit)})"


def refs(action: Action | ActionUnit) -> list[str]:
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


def _split_ref(part: str) -> tuple[str, str]:
    key, _, value = part.partition("=")
    return key, value


def _undone_by(actions: Sequence[Action]) -> dict[int, Action]:
    """Writes a later write took back (a cancel, release or delete naming one of
    their ids), keyed by ``id()`` of the undone call."""
    out: dict[int, Action] = {}
    ordered = sorted(actions, key=lambda a: a.seq)
    for i, undo in enumerate(ordered):
        if undo.status != "done" or not _UNDO.search(undo.tool):
            continue
        wanted = {v for v in _values(undo.arguments) if len(v) >= 4}
        for earlier in ordered[:i]:
            if earlier is undo or earlier.status != "done" or _UNDO.search(earlier.tool):
                continue
            if wanted & set(_ids(earlier)):
                out[id(earlier)] = undo
    return out


def undone_writes(
    actions: Sequence[Action], kinds: Mapping[str, ToolKind] | None = None
) -> set[int]:
    """``id()`` of the write calls a later write took back."""
    return set(_undone_by([a for a in actions if tool_kind(a, kinds) == "write"]))


def updated_values(
    actions: Sequence[Action], kinds: Mapping[str, ToolKind] | None = None
) -> list[tuple[str, str, str]]:
    """``(argument, earlier value, current value)`` for every value a later write
    replaced on the same object: ``create_batch(size=5000) → batch_id=B-1`` then
    ``update_batch(batch_id=B-1, size=8000)`` gives ``("size", "5000", "8000")``.

    The object is an id a write produced (a ref of its result) or acted on (an
    id-like argument of an update), passed to the later write as an argument. Two
    writes that only share an owner (the same customer) change nothing of each other.
    """
    writes = sorted(
        (a for a in actions if a.status == "done" and tool_kind(a, kinds) == "write"),
        key=lambda a: a.seq,
    )
    history: dict[tuple[str, str], list[str]] = {}  # (object id, argument) -> values
    objects: set[str] = set()  # ids some write produced
    for action in writes:
        given = {str(v) for k, v in action.arguments.items() if _ID_KEY.search(k) and _scalar(v)}
        acted_on = sorted(v for v in given if v in objects)
        for obj in acted_on:
            for key, value in action.arguments.items():
                if _scalar(value) and not _ID_KEY.search(key) and str(value) not in given:
                    history.setdefault((obj, key), []).append(str(value))
        produced = [_split_ref(part)[1] for part in refs(action)]
        for obj in produced:
            if obj and obj not in objects and obj not in given:
                objects.add(obj)
                for key, value in action.arguments.items():
                    if _scalar(value) and not _ID_KEY.search(key):
                        history.setdefault((obj, key), []).append(str(value))
    changes: list[tuple[str, str, str]] = []
    for (_, key), values in history.items():
        current = values[-1]
        for old in dict.fromkeys(values[:-1]):
            if old != current and (key, old, current) not in changes:
                changes.append((key, old, current))
    return changes


def _values(arguments: Mapping[str, Any]) -> list[str]:
    """Scalar argument values as strings (nested lists and objects flattened)."""
    out: list[str] = []
    stack: list[Any] = list(arguments.values())
    while stack and len(out) < 64:
        value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            out.append(str(value))
    return out


def _ids(action: Action) -> list[str]:
    """The values that identify a call's effect: id-like arguments and result refs."""
    found = [str(v) for k, v in action.arguments.items() if _ID_KEY.search(k) and _scalar(v)]
    found += [_split_ref(part)[1] for part in refs(action)]
    return list(dict.fromkeys(v for v in found if v))


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _id_pairs(action: Action) -> str:
    pairs = [(k, v) for k, v in action.arguments.items() if _ID_KEY.search(k) and _scalar(v)]
    return ", ".join(f"{k}={_fmt_value(v)}" for k, v in pairs[:3])


def write_line(
    action: Action, lab: Mapping[str, str], detail: Detail, undone: Action | None
) -> str:
    """One write call: always its own line, with its key ids and its outcome."""
    if detail <= Detail.GROUPED:
        text = full_line(action, lab)
    elif detail == Detail.COMPACT:
        text = compact_line(action, lab)
    else:
        ids = ", ".join(refs(action)) if action.status == "done" else ""
        call = f"{action.tool}({_id_pairs(action)})"
        outcome = ids or (clip(action.result_summary, 60) if action.status == "failed" else "")
        text = f"{_marker(action, lab)} {call}" + (f" → {outcome}" if outcome else "")
    if undone is not None:
        text += lab["undone"].format(tool=undone.tool)
    return text


def read_lines(
    actions: Sequence[Action], lab: Mapping[str, str], detail: Detail, used: Used
) -> list[LedgerLine]:
    """Read-only calls: one line per tool with its count, naming only the argument
    values something later used (a write, a parameter, a decision…); at MINIMAL
    detail, all tools on one line."""
    by_tool: dict[str, list[Action]] = {}
    for action in sorted(actions, key=lambda a: a.seq):
        by_tool.setdefault(action.tool, []).append(action)
    entries = []
    unresolved = []
    for tool, calls in by_tool.items():
        if calls[-1].status == "failed":
            # Still failing: the agent must see why before it tries again.
            line = full_line if detail <= Detail.GROUPED else compact_line
            unresolved.append(LedgerLine(line(calls[-1], lab), calls[-1].seq))
            calls = calls[:-1]
            if not calls:
                continue
        text = f"{tool} ×{len(calls)}" if len(calls) > 1 else tool
        failed = sum(1 for a in calls if a.status == "failed")
        extra = [lab["failures"].format(n=failed)] if failed else []
        if detail < Detail.MINIMAL:
            extra += _used_values(calls, used)
        if extra:
            text += f" ({'; '.join(extra)})"
        # What a lookup obtained is kept at every detail level, as a write's ids are.
        obtained = _obtained(calls)
        if obtained:
            text += f" → {', '.join(obtained)}"
        entries.append(LedgerLine(text, max(a.seq for a in calls)))
    if detail == Detail.MINIMAL:
        if not entries:
            return unresolved
        joined = lab["sep"].join(e.text for e in entries)
        return [*unresolved, LedgerLine(f"{lab['read']} {joined}", max(e.seq for e in entries))]
    return [*unresolved, *(LedgerLine(f"{lab['read']} {e.text}", e.seq) for e in entries)]


# A lookup that returned at most this many ids it was not given keeps them (an
# order found by email, a dataset handle); a search listing hits keeps none.
_OBTAINED_IDS = 2


def _obtained(calls: Sequence[Action]) -> list[str]:
    """The ids the successful calls of a lookup obtained, each call's own: an agent
    that loses them has to look them up again. Three orders looked up by three
    emails are three ids, whichever came last; the newest ``_MAX_VALUES`` distinct
    ones, as ``key=v1|v2`` per key."""
    found: dict[str, dict[str, None]] = {}
    for call in calls:
        for part in _obtained_by(call) if call.status == "done" else ():
            key, value = _split_ref(part)
            values = found.setdefault(key, {})
            values.pop(value, None)  # a value obtained again counts as the newest
            values[value] = None
    return [f"{key}={'|'.join(list(values)[-_MAX_VALUES:])}" for key, values in found.items()]


def _obtained_by(call: Action) -> list[str]:
    given = set(_values(call.arguments))
    # Ids of the result itself, not of the hits of a list it holds.
    top = {path.split(".")[-1] for path in call.ref_paths if "[" not in path}
    found = [
        part
        for part in refs(call)
        if _split_ref(part)[0] in top and _split_ref(part)[1] not in given
    ]
    return found if len(found) <= _OBTAINED_IDS else []


def _used_values(calls: Sequence[Action], used: Used) -> list[str]:
    keyed: dict[str, list[str]] = {}
    for action in calls:
        for key, value in action.arguments.items():
            if _scalar(value) and used(str(value)):
                keyed.setdefault(key, [])
                if _fmt_value(value, 24) not in keyed[key]:
                    keyed[key].append(_fmt_value(value, 24))
    return [f"{k}={'|'.join(v[:_MAX_VALUES])}" for k, v in keyed.items()]


def ledger_lines(
    actions: Sequence[Action],
    lab: Mapping[str, str],
    detail: Detail,
    *,
    kinds: Mapping[str, ToolKind] | None = None,
    used: Used | None = None,
) -> list[LedgerLine]:
    """The ledger at ``detail``, oldest first: every write call on its own line
    (a taken-back one says so), read-only calls grouped per tool."""
    writes = [a for a in actions if tool_kind(a, kinds) == "write"]
    reads = [a for a in actions if tool_kind(a, kinds) == "read"]
    undone = _undone_by(writes)
    recent = {id(a) for a in sorted(writes, key=lambda a: a.seq)[-RECENT_CALLS:]}
    lines = []
    for action in writes:
        level = detail
        if detail == Detail.GROUPED and id(action) not in recent:
            level = Detail.COMPACT
        text = write_line(action, lab, level, undone.get(id(action)))
        lines.append(LedgerLine(text, action.seq, write=True))
    lines += read_lines(reads, lab, detail, used or (lambda _v: False))
    return sorted(lines, key=lambda line: line.seq)

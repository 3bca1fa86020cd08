"""Rendering the task state as one dense, language-aware text block for the prompt.

The template is fixed so agents (and tests) can rely on it:

    ## Task state (through turn N)          ## 任务状态（截至第 N 轮）
    Goal: …                                 目标：…
    Constraints (must follow): - …          约束（必须遵守）：- …
    Pinned facts: - …                       重要信息（始终适用）：- …
    Actions taken (do not repeat):          已执行的操作（勿重复）：
    Done tool(args) → result                已完成 tool(args) → result
    Failed tool(args) → error               失败 tool(args) → error
    Current parameters: - x: 64 (was 32)    当前参数：- x：64 (原为 32)
    Awaiting the user: Pending: …           等待用户：待确认：…
    Next steps: - … (missing: …)            下一步：- …（缺少：…）

The action ledger and open todos are always rendered, however old. Every
write call (book, cancel, send…: ``ledger.tool_kind``) keeps its own line with
its ids and outcome; read-only calls are one line per tool with a count and
only the argument values something later used. With ``max_tokens`` the least
important detail goes first, in this order, until the block fits:

1. revoked items, facts, notes, answered questions, artifacts, closed todos;
2. older writes shortened to their ids and a clipped outcome;
3. decisions, blockers; every write shortened;
4. lookups reduced to one line of counts and the ids they obtained, writes to
   ``tool(ids) → ids``; then preferences and the goal.

Constraints, pinned facts, pending confirmations, open todos, current
parameters and the ledger are never dropped, even if the block then exceeds
the budget. ``render_tiers`` renders
the state at shrinking budgets, so the context read can choose without
rendering.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from app.compression.extract.base import MOVED_ON
from app.compression.ledger import (
    Detail,
    ToolKind,
    Used,
    ledger_lines,
    tool_kind,
    undone_writes,
    updated_values,
)
from app.compression.state import Language, Note, TaskState
from app.compression.text import clip
from app.compression.text import detect_language as _detect
from app.compression.untrusted import neutral_state
from app.core.tokens import count_tokens as _count_tokens

TokenCounter = Callable[[str], int]
_MOVED_ON = frozenset(MOVED_ON.values())
NEVER_DROP = math.inf
DEFAULT_MIN_ACTIVITY = 0.05
# Each smaller rendering aims at this share of the previous one's size.
TIER_STEP = 0.7
MIN_TIER_TOKENS = 60

LABELS: dict[str, dict[str, str]] = {
    "en": {
        "title": "## Task state (through turn {n})",
        "goal": "Goal: {text}",
        "constraints": "Constraints (must follow):",
        "pinned": "Pinned facts (always apply):",
        "preferences": "Preferences:",
        "actions": "Actions taken (do not repeat):",
        "done": "Done",
        "failed": "Failed",
        "called": "Called",
        "read": "Looked up",
        "undone": " — cancelled later by {tool}",
        "no_result": "no result recorded",
        "calls": "{n} calls",
        "failures": "{n} failed",
        "last": "last → {text}",
        "params": "Current parameters:",
        "param": "- {name}: {value}",
        "was": " (was {old})",
        "changed": " (changed: {name} is now {value})",
        "changed_to": " (changed: now {value})",
        "artifacts": "Ids and artifacts:",
        "decisions": "Decisions:",
        "answered": "- Answered: {q} → {a}",
        "facts": "Facts:",
        "pending_header": "Awaiting the user:",
        "pending": "Pending: {text}",
        "todos": "Next steps:",
        "missing": " (missing: {items})",
        "blockers": "Blockers:",
        "revoked": "No longer applies:",
        "notes": "Notes: {text}",
        "sep": ", ",
    },
    "zh": {
        "title": "## 任务状态（截至第 {n} 轮）",
        "goal": "目标：{text}",
        "constraints": "约束（必须遵守）：",
        "pinned": "重要信息（始终适用）：",
        "preferences": "偏好：",
        "actions": "已执行的操作（勿重复）：",
        "done": "已完成",
        "failed": "失败",
        "called": "已调用",
        "read": "已查询",
        "undone": "（后已由 {tool} 取消）",
        "no_result": "无结果记录",
        "calls": "共 {n} 次",
        "failures": "{n} 次失败",
        "last": "最近一次 → {text}",
        "params": "当前参数：",
        "param": "- {name}：{value}",
        "was": " (原为 {old})",
        "changed": "（已调整：{name}改为 {value}）",
        "changed_to": "（已调整：改为 {value}）",
        "artifacts": "编号与产出：",
        "decisions": "决定：",
        "answered": "- 已答复：{q} → {a}",
        "facts": "已知信息：",
        "pending_header": "等待用户：",
        "pending": "待确认：{text}",
        "todos": "下一步：",
        "missing": "（缺少：{items}）",
        "blockers": "阻碍：",
        "revoked": "已撤销（不再适用）：",
        "notes": "备注：{text}",
        "sep": "、",
    },
}

# Drop order under a token budget: lowest first.
_PRIORITY = {
    "revoked": 0.0,
    "facts": 1.0,
    "notes": 1.0,
    "answered": 1.5,
    "artifacts": 2.0,
    "todo_done": 2.0,
    "decisions": 3.0,
    "blockers": 4.0,
    # Above the COMPACT level's threshold: lookups shrink to counts first.
    "preferences": 5.6,
    "goal": 8.0,
}


def detect_language(texts: Iterable[str | None]) -> Language:
    """ "zh" or "en" by the share of CJK characters (see ``text.detect_language``)."""
    return _detect(texts)


# Before each ledger detail level is given up, lines below this priority may go.
_DROP_BELOW = {
    Detail.FULL: 2.5,
    Detail.GROUPED: 4.5,
    Detail.COMPACT: 5.5,
    Detail.MINIMAL: NEVER_DROP,
}


@dataclass(slots=True)
class _Line:
    text: str
    priority: float = NEVER_DROP
    activity: float = 1.0
    seq: int = 0


@dataclass(slots=True)
class _Section:
    header: str | None
    lines: list[_Line] = field(default_factory=list)


def render(
    state: TaskState,
    *,
    language: str | None = None,
    max_tokens: int | None = None,
    count_tokens: TokenCounter = _count_tokens,
    min_activity: float = DEFAULT_MIN_ACTIVITY,
    tool_kinds: Mapping[str, ToolKind] | None = None,
) -> str:
    """The state as prompt text ('' when there is nothing to say)."""
    state = neutral_state(state)  # text from turns stays data: one line each, output quoted
    lang = language if language in LABELS else (state.language or "en")
    lab = LABELS[lang]
    title = lab["title"].format(n=state.last_seq)
    first = Detail.FULL
    ledger = _Ledger(tool_kinds, _used_values(state, tool_kinds), _in_calls(state))
    # Lines a coarser ledger would leave room for stay dropped: a detail level is
    # only given up once everything less important than it is gone.
    gone = -math.inf
    for detail in Detail:
        if detail < first:
            continue
        sections = _sections(state, lab, min_activity, detail, ledger)
        if not any(s.lines for s in sections):
            return ""
        if max_tokens is None:
            return _join(title, sections)
        for section in sections:
            section.lines = [line for line in section.lines if line.priority >= gone]
        if _fit(title, sections, max_tokens, count_tokens, below=_DROP_BELOW[detail]):
            break
        gone = _DROP_BELOW[detail]
    return _join(title, sections)


def _join(title: str, sections: list[_Section]) -> str:
    out = [title]
    for section in sections:
        if not section.lines:
            continue
        if section.header:
            out.append(section.header)
        out.extend(line.text for line in section.lines)
    return "\n".join(out)


def _fit(
    title: str, sections: list[_Section], budget: int, count: TokenCounter, *, below: float
) -> bool:
    """Drop the lowest-priority lines (under ``below``) until the block fits; True if it does."""
    droppable = sorted(
        (
            (line.priority, line.activity, line.seq, i, j)
            for i, s in enumerate(sections)
            for j, line in enumerate(s.lines)
            if line.priority < below
        ),
        reverse=True,
    )
    costs = {
        (i, j): count(line.text) + 1
        for i, s in enumerate(sections)
        for j, line in enumerate(s.lines)
    }
    total = count(_join(title, sections))
    removed: set[tuple[int, int]] = set()
    while total > budget and droppable:
        *_, i, j = droppable.pop()
        removed.add((i, j))
        total -= costs[(i, j)]
        section = sections[i]
        if section.header and all((i, k) in removed for k in range(len(section.lines))):
            total -= count(section.header) + 1
        if total <= budget:
            # The estimate ignores how lines merge into tokens; confirm on the real text.
            total = count(_join(title, _without(sections, removed)))
    for i, section in enumerate(sections):
        section.lines = [line for j, line in enumerate(section.lines) if (i, j) not in removed]
    return total <= budget


def _without(sections: list[_Section], removed: set[tuple[int, int]]) -> list[_Section]:
    return [
        _Section(s.header, [line for j, line in enumerate(s.lines) if (i, j) not in removed])
        for i, s in enumerate(sections)
    ]


# ----------------------------------------------------------------------- sections


@dataclass(frozen=True, slots=True)
class _Ledger:
    kinds: Mapping[str, ToolKind] | None
    used: Used
    # An id the ledger already shows, or a code only ever browsed: not an artifact.
    in_calls: Used


def _used_values(state: TaskState, kinds: Mapping[str, ToolKind] | None) -> Used:
    """Whether a value shows up in what the state keeps for its own sake: the goal,
    constraints, parameters, decisions… and the write calls."""
    texts = [state.goal.text] if state.goal else []
    for pool in (
        state.constraints,
        state.preferences,
        state.decisions,
        state.facts,
        state.pending,
        state.todos,
        state.high_stakes,
        state.blockers,
    ):
        texts += [item.text for item in pool]
    texts += [f"{p.name} {p.value}" for p in state.parameters]
    undone = undone_writes(state.actions, kinds)
    for action in state.actions:
        if tool_kind(action, kinds) == "write" and id(action) not in undone:
            texts.append(json.dumps(action.arguments, ensure_ascii=False))
            texts.append(action.result_summary)
    corpus = "\n".join(texts).casefold()

    def used(value: str) -> bool:
        # A whole token, not a piece of a word: "LIS" is not used by "Lisbon".
        v = value.casefold()
        at = corpus.find(v)
        while len(v) >= 3 and at >= 0:
            before = corpus[at - 1] if at else " "
            after = corpus[at + len(v)] if at + len(v) < len(corpus) else " "
            if not (before.isascii() and before.isalnum()) and not (
                after.isascii() and after.isalnum()
            ):
                return True
            at = corpus.find(v, at + 1)
        return False

    return used


@dataclass(frozen=True, slots=True)
class ValueChange:
    old: re.Pattern[str]
    current: re.Pattern[str]
    name: str
    value: str


# What a figure may carry around its digits: currency, thousands separators.
_MONEY = re.compile(r"[¥$€£￥,\s]|\b(?:USD|EUR|CNY|RMB|GBP|JPY|HKD)\b|元$|块$", re.I)
_FIGURE = re.compile(r"(?P<int>\d++)(?:\.(?P<dec>\d++))?")
_ISO_DATE = re.compile(r"(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})")
_MONTH_NAMES = (
    "Jan(?:uary|\\.)?",
    "Feb(?:ruary|\\.)?",
    "Mar(?:ch|\\.)?",
    "Apr(?:il|\\.)?",
    "May",
    "June?",
    "July?",
    "Aug(?:ust|\\.)?",
    "Sep(?:t|tember|\\.)?",
    "Oct(?:ober|\\.)?",
    "Nov(?:ember|\\.)?",
    "Dec(?:ember|\\.)?",
)


def _value_pattern(value: str) -> re.Pattern[str] | None:
    """A value as it may be written: "$35,000" also matches "35000" and "35 000",
    "2025-06-06" also "June 6", "6 Jun" and "6月6日"; anything else as written, a
    word only as a whole word. None for values too short to find safely."""
    value = value.strip()
    date = _ISO_DATE.fullmatch(value)
    if date is not None and 1 <= int(date["m"]) <= 12:
        month, day = _MONTH_NAMES[int(date["m"]) - 1], str(int(date["d"]))
        return re.compile(
            rf"{re.escape(value)}|\b{month}\s*{day}(?![\d])|(?<![\d]){day}(?:st|nd|rd|th)?\s+"
            rf"(?:of\s+)?{month}\b|(?<![\d]){int(date['m'])}\s*月\s*{day}\s*[日号]",
            re.I,
        )
    figure = _FIGURE.fullmatch(_MONEY.sub("", value))
    if figure is not None and len(figure["int"]) + len(figure["dec"] or "") >= 2:
        body = r"[,\s]?".join(figure["int"])
        if figure["dec"]:
            body += r"\." + figure["dec"]
        return re.compile(rf"(?<![\d.]){body}(?![\d]|\.\d)")
    if len(value) < 2 or (value.isascii() and len(value) < 3):
        return None
    if value.isascii():
        return re.compile(rf"(?<![\w]){re.escape(value)}(?![\w]|[.,]\d)", re.I)
    return re.compile(rf"(?<![\d]){re.escape(value)}(?![\d])", re.I)


# A reversed choice as the extractor records it: "B instead of A", "改为B（不再是A）".
_REPLACED = re.compile(
    r"^(?P<new>[^\n]{1,40}?) instead of (?P<old>[^\n]{1,40})$"
    r"|^改为(?P<new2>[^（\n]{1,40})（不再是(?P<old2>[^）\n]{1,40})）$"
)


def _changes(state: TaskState, kinds: Mapping[str, ToolKind] | None = None) -> list[ValueChange]:
    pairs = [(p.name, p.value, old.value) for p in state.parameters for old in p.history]
    # A value a later write replaced on the same object (an update of a booking, a
    # batch, a rule) has changed too, whether or not anyone said so in words.
    pairs += [(key, new, old) for key, old, new in updated_values(state.actions, kinds)]
    for d in state.decisions:
        m = _REPLACED.match(d.text) if d.status == "active" else None
        if m is not None:
            new, old = m["new"] or m["new2"], m["old"] or m["old2"]
            pairs.append((new, new, old))
    return [c for name, value, was in pairs if (c := change_of(name, value, was)) is not None]


def change_of(name: str, value: str, was: str) -> ValueChange | None:
    """How to find ``was`` where it still stands for ``name`` (now ``value``); None
    when ``was`` is too short to find safely or ``value`` contains it."""
    current, pattern = _value_pattern(value), _value_pattern(was)
    if pattern is not None and current is not None and not pattern.search(value):
        return ValueChange(pattern, current, name, value)
    return None


# The renderer's own marks of a replaced value: a line carrying one says so already.
_MARKED = re.compile(r"\(was |（原为|\(原为| instead of |改为|不再是|\(changed:|（已调整")


def annotate(text: str, changes: Sequence[ValueChange], lab: Mapping[str, str]) -> str:
    """``text`` with a "(changed: … is now …)" mark for each old value it still names."""
    for change in changes:
        if change.old.search(text) and not (change.current.search(text) and _MARKED.search(text)):
            label = "changed_to" if change.name == change.value else "changed"
            text += lab[label].format(name=change.name, value=change.value)
    return text


def _in_calls(state: TaskState) -> Used:
    texts = [json.dumps(a.arguments, ensure_ascii=False) + a.result_summary for a in state.actions]
    corpus = "\n".join(texts).casefold()
    return lambda value: value.casefold() in corpus


def render_tiers(
    state: TaskState,
    *,
    language: str | None = None,
    max_tokens: int,
    count_tokens: TokenCounter = _count_tokens,
    tool_kinds: Mapping[str, ToolKind] | None = None,
) -> list[str]:
    """The state rendered at shrinking budgets, largest first, each distinct: the
    context read picks the largest that fits the room its budget leaves the state
    (it must not extract or render anything itself)."""
    tiers: list[str] = []
    budget = max_tokens
    while budget >= MIN_TIER_TOKENS:
        text = render(
            state,
            language=language,
            max_tokens=budget,
            count_tokens=count_tokens,
            tool_kinds=tool_kinds,
        )
        if not text:
            break
        size = count_tokens(text)
        if not tiers or text != tiers[-1]:
            tiers.append(text)
        if size > budget:
            break  # only what is never dropped is left
        budget = int(min(budget, size) * TIER_STEP)
    return tiers


def _sections(
    state: TaskState, lab: dict[str, str], min_activity: float, detail: Detail, ledger: _Ledger
) -> list[_Section]:
    def visible(activity: float) -> bool:
        return activity >= min_activity

    goal = _Section(None)
    if state.goal is not None:
        text = lab["goal"].format(text=state.goal.text)
        if state.goal.history:
            text += lab["was"].format(old=clip(state.goal.history[-1].value, 80))
        goal.lines.append(_Line(text, _PRIORITY["goal"]))

    constraints = _Section(
        lab["constraints"],
        [
            _Line(f"- {c.text}" + (" (!)" if c.emphasized else ""), seq=c.last_seen)
            for c in sorted(
                state.active_constraints(), key=lambda c: (not c.emphasized, c.last_seen)
            )
        ],
    )
    pinned = _Section(
        lab["pinned"], [_Line(f"- {h.text}", seq=h.last_seen) for h in state.high_stakes]
    )
    preferences = _Section(
        lab["preferences"],
        [
            _Line(f"- {p.text}", _PRIORITY["preferences"], p.activity, p.last_seen)
            for p in state.preferences
            if p.status == "active"
        ],
    )

    # The ledger is never hidden for age: it is compressed instead (ledger.py).
    actions = _Section(
        lab["actions"],
        [
            # The ledger is never dropped, only shortened (ledger.py): writes to
            # their ids and outcome, lookups to one line of counts.
            _Line(line.text, NEVER_DROP, 1.0, line.seq)
            for line in ledger_lines(
                state.actions, lab, detail, kinds=ledger.kinds, used=ledger.used
            )
        ],
    )
    actions.lines += [
        _Line(f"{lab['done']} {t.text}", _PRIORITY["todo_done"], t.activity, t.last_seen)
        for t in state.todos
        if t.status == "done" and visible(t.activity)
    ]

    params = _Section(lab["params"])
    for p in state.parameters:
        text = lab["param"].format(name=p.name, value=p.value)
        if p.history:
            text += lab["was"].format(old=p.history[-1].value)
        params.lines.append(_Line(text, NEVER_DROP, p.activity, p.source_seq))

    artifacts = _Section(
        lab["artifacts"],
        [
            _Line(f"- {a.label or a.kind}: {a.value}", _PRIORITY["artifacts"], a.activity, a.seq)
            for a in state.artifacts
            if visible(a.activity) and not ledger.in_calls(a.value)
        ],
    )
    decisions = _Section(
        lab["decisions"],
        [
            _Line(f"- {d.text}", _PRIORITY["decisions"], d.activity, d.last_seen)
            for d in state.decisions
            if d.status == "active" and visible(d.activity)
        ],
    )
    decisions.lines += [
        _Line(
            lab["answered"].format(q=clip(p.text, 100), a=p.resolution or ""),
            _PRIORITY["answered"],
            1.0,
            p.resolved_seq or p.last_seen,
        )
        for p in state.pending
        if p.status == "resolved" and p.resolution not in _MOVED_ON
    ]
    facts = _Section(
        lab["facts"],
        [
            _Line(f"- {f.text}", _PRIORITY["facts"], f.activity, f.last_seen)
            for f in state.facts
            if f.status == "active" and visible(f.activity)
        ],
    )
    pending = _Section(
        lab["pending_header"],
        [_Line(lab["pending"].format(text=p.text), seq=p.last_seen) for p in state.open_pending()],
    )
    todos = _Section(lab["todos"])
    for t in state.todos:
        if t.status != "open":
            continue  # open todos are work still owed: never hidden for age
        text = f"- {t.text}"
        if t.missing_prerequisites:
            text += lab["missing"].format(items=lab["sep"].join(t.missing_prerequisites))
        # Work still owed is never dropped either: an agent that no longer sees it
        # (or what it waits for) either forgets it or does it too early.
        todos.lines.append(_Line(text, NEVER_DROP, t.activity, t.last_seen))
    blockers = _Section(
        lab["blockers"],
        [
            _Line(f"- {b.text}", _PRIORITY["blockers"], b.activity, b.last_seen)
            for b in state.blockers
            if b.status == "active" and visible(b.activity)
        ],
    )
    revoked_items: list[Note] = [c for c in state.constraints if c.status == "revoked"]
    revoked_items += [n for n in state.preferences + state.decisions if n.status == "revoked"]
    revoked = _Section(
        lab["revoked"],
        [_Line(f"- {r.text}", _PRIORITY["revoked"], r.activity, r.last_seen) for r in revoked_items]
        + [
            _Line(f"- {t.text}", _PRIORITY["revoked"], t.activity, t.last_seen)
            for t in state.todos
            if t.status == "cancelled" and visible(t.activity)
        ],
    )
    notes = _Section(None)
    if state.summary:
        notes.lines.append(_Line(lab["notes"].format(text=state.summary), _PRIORITY["notes"]))
    # A changed parameter updates every place its old value still stands, lookups
    # included (a write's line shows its own outcome, and the update's line is there).
    changes = _changes(state, ledger.kinds)
    if changes:
        for line in actions.lines:
            if not line.text.startswith((lab["done"], lab["failed"], lab["called"])):
                line.text = annotate(line.text, changes, lab)
        for section in (
            goal,
            constraints,
            pinned,
            preferences,
            params,
            decisions,
            facts,
            pending,
            todos,
            notes,
        ):
            for line in section.lines:
                line.text = annotate(line.text, changes, lab)
    return [
        goal,
        constraints,
        pinned,
        preferences,
        actions,
        params,
        artifacts,
        decisions,
        facts,
        pending,
        todos,
        blockers,
        revoked,
        notes,
    ]

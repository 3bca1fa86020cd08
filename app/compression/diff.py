"""A two-sentence, human-readable summary of what one compression changed.

Stored on the compression event (``change_summary``): the first sentence says
what was added or changed, the second what is still outstanding.
"""

from __future__ import annotations

from collections import Counter

from app.compression.state import TaskState
from app.compression.text import clip

# Counted things, in the order they are reported. The first group reads after
# "Added …", the second stands on its own ("1 constraint revoked").
_ADDED = ("constraint", "pinned", "done", "failed", "pending", "todo", "artifact")
_CHANGED = ("revoked", "resolved", "todo_done")
_EN = {
    "constraint": ("constraint", "constraints"),
    "pinned": ("pinned fact", "pinned facts"),
    "done": ("completed action", "completed actions"),
    "failed": ("failed action", "failed actions"),
    "pending": ("confirmation request", "confirmation requests"),
    "todo": ("todo", "todos"),
    "artifact": ("artifact", "artifacts"),
    "revoked": ("constraint revoked", "constraints revoked"),
    "resolved": ("confirmation answered", "confirmations answered"),
    "todo_done": ("todo finished", "todos finished"),
}
_ZH = {
    "constraint": "{n} 条约束",
    "pinned": "{n} 条重要信息",
    "done": "{n} 项已完成操作",
    "failed": "{n} 项失败操作",
    "pending": "{n} 项待确认",
    "todo": "{n} 项待办",
    "artifact": "{n} 个编号/产出",
    "revoked": "撤销 {n} 条约束",
    "resolved": "{n} 项确认已答复",
    "todo_done": "完成 {n} 项待办",
}
# How a parameter's change reads in the summary ("batch_size changed 32 → 64"); the
# recall judge derives from it which part of the line is the former value.
CHANGED = {"en": "{name} changed {was} → {value}", "zh": "{name} 由 {was} 改为 {value}"}
SET = {"en": "{name} set to {value}", "zh": "{name} 设为 {value}"}


def _counts(old: TaskState, new: TaskState) -> Counter[str]:
    c: Counter[str] = Counter()
    old_constraints = {x.key: x.status for x in old.constraints}
    for x in new.constraints:
        if x.key not in old_constraints:
            c["constraint"] += 1
        if x.status == "revoked" and old_constraints.get(x.key) != "revoked":
            c["revoked"] += 1
    old_attempts = {(a.key, at.seq, at.call_id) for a in old.actions for at in a.attempts}
    for a in new.actions:
        for at in a.attempts:
            if (a.key, at.seq, at.call_id) not in old_attempts and at.status in ("done", "failed"):
                c[at.status] += 1
    old_pending = {p.key: p.status for p in old.pending}
    for p in new.pending:
        if p.key not in old_pending:
            c["pending"] += 1
        if p.status == "resolved" and old_pending.get(p.key) != "resolved":
            c["resolved"] += 1
    old_todos = {t.key: t.status for t in old.todos}
    for t in new.todos:
        if t.key not in old_todos:
            c["todo"] += 1
        if t.status == "done" and old_todos.get(t.key) != "done":
            c["todo_done"] += 1
    c["pinned"] = len({h.key for h in new.high_stakes} - {h.key for h in old.high_stakes})
    c["artifact"] = len({a.key for a in new.artifacts} - {a.key for a in old.artifacts})
    return c


def _param_changes(old: TaskState, new: TaskState, zh: bool) -> list[str]:
    before = {p.key: p.value for p in old.parameters}
    lang = "zh" if zh else "en"
    changes = []
    for p in new.parameters:
        value = clip(p.value, 40)
        if p.key not in before:
            changes.append(SET[lang].format(name=p.name, value=value))
        elif before[p.key] != p.value:
            was = clip(before[p.key], 40)
            changes.append(CHANGED[lang].format(name=p.name, was=was, value=value))
    return changes


def diff_summary(old: TaskState, new: TaskState, language: str | None = None) -> str:
    """Two sentences: what changed, then what is outstanding.

    E.g. "Added 2 constraints, 3 completed actions; batch_size changed 32 → 64.
    1 confirmation pending."
    """
    zh = (language or new.language or "en") == "zh"
    counts = _counts(old, new)

    def phrase(key: str) -> str:
        n = counts[key]
        return _ZH[key].format(n=n) if zh else f"{n} {_EN[key][n != 1]}"

    added = [phrase(k) for k in _ADDED if counts[k]]
    changed = [phrase(k) for k in _CHANGED if counts[k]]
    params = _param_changes(old, new, zh)
    if new.goal is not None and (old.goal is None or old.goal.key != new.goal.key):
        goal = clip(new.goal.text, 60).rstrip(".。!！")
        params.insert(0, f"目标：{goal}" if zh else f"goal: {goal}")
    open_pending = len(new.open_pending())
    open_todos = sum(1 for t in new.todos if t.status == "open")
    if zh:
        groups = [
            ("新增 " + "、".join(added)) if added else "",
            "、".join(changed),
            "；".join(params),
        ]
        first = "；".join(g for g in groups if g) or "无变化"
        second = f"{open_pending} 项待确认" if open_pending else "无待确认事项"
        if open_todos:
            second += f"，{open_todos} 项待办"
        return f"{first}。{second}。"
    groups = [("Added " + ", ".join(added)) if added else "", ", ".join(changed), "; ".join(params)]
    first = "; ".join(g for g in groups if g) or "No changes"
    first = first[0].upper() + first[1:]
    noun = "confirmation" if open_pending == 1 else "confirmations"
    second = f"{open_pending} {noun} pending" if open_pending else "Nothing pending"
    if open_todos:
        second += f", {open_todos} open todo{'s' if open_todos != 1 else ''}"
    return f"{first}. {second}."

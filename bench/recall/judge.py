"""Judging one context: is each planted item there, did chit-chat leak in, and did
consecutive compressions change what no turn explains.

Matching ignores case, spacing and punctuation (``norm``). An item counts when the
task state shows it with its marker, or when the raw turns that state it are still
in the context; constraints, pinned facts, todos and actions quoted in another
system block (long-term memory) count too.
"""

from __future__ import annotations

import itertools
import json
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.recall.rendered import (
    ANSWERED,
    CALLED,
    CHANGED_FROM,
    DONE,
    FAILED,
    MISSING,
    PENDING,
    WAS,
    StateView,
)
from bench.sessions import RECALL_KINDS, Planted, Session


def norm(text: str) -> str:
    """NFKC, casefold, letters and digits only: matching ignores spacing and punctuation."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if ch.isalnum())


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def contains(haystack: str, needle: str) -> bool:
    n = norm(needle)
    return bool(n) and n in norm(haystack)


def leaked(phrase: str, text_norm: str) -> bool:
    """A noise phrase, or a long enough piece of it (16 chars; 6 for Chinese), is in the text."""
    n = norm(phrase)
    width = 6 if _is_cjk(phrase) else 16
    if len(n) <= width:
        return bool(n) and n in text_norm
    return any(n[i : i + width] in text_norm for i in range(len(n) - width + 1))


def _bigrams(text: str) -> set[str]:
    n = norm(text)
    return {n[i : i + 2] for i in range(len(n) - 1)}


def closest_lines(lines: Sequence[str], text: str, k: int = 2) -> list[str]:
    """The state lines most like ``text`` (character-bigram Jaccard), for miss reports."""
    want = _bigrams(text)
    scored = []
    for line in lines:
        have = _bigrams(line)
        if want and have:
            scored.append((len(want & have) / len(want | have), line))
    scored.sort(key=lambda s: -s[0])
    return [line for score, line in scored[:k] if score > 0.08]


@dataclass
class Context:
    """What an agent would get: the task state (may be empty), the system message's
    other blocks (long-term memories…), and the raw messages."""

    state: str
    messages: list[dict[str, Any]]
    tokens: int
    other_blocks: str = ""

    def __post_init__(self) -> None:
        self.view = StateView.parse(self.state)
        self.raw_keys = set()
        for m in self.messages:
            for call in m.get("tool_calls") or ():
                self.raw_keys.add(("call", call.get("id")))
            if m.get("role") == "tool":
                self.raw_keys.add(("result", m.get("tool_call_id")))
            elif m.get("content"):
                self.raw_keys.add((m["role"], m["content"]))
        self.other_lines = [x.strip() for x in self.other_blocks.splitlines() if x.strip()]
        self.system_norm = norm(self.state + "\n" + self.other_blocks)
        everything = [self.state, self.other_blocks]
        everything += [m.get("content") or "" for m in self.messages]
        everything += [
            json.dumps(m.get("tool_calls"), ensure_ascii=False)
            for m in self.messages
            if m.get("tool_calls")
        ]
        self.all_norm = norm("\n".join(everything))
        self.state_norm = norm(self.state)


# Kinds whose wording alone carries them, so a quote in another block (long-term
# memory episodes) counts; pending items and parameters need the state's markers.
MEMORY_CREDIT = ("constraint", "high_stakes", "todo", "action_done", "action_failed")


def message_key(message: Mapping[str, Any]) -> tuple[str, Any]:
    if message.get("tool_calls"):
        return ("call", message["tool_calls"][0]["id"])
    if message["role"] == "tool":
        return ("result", message.get("tool_call_id"))
    return (message["role"], message.get("content"))


def _param_current(item: Planted, ctx: Context) -> list[str]:
    """Parameter lines naming the item whose current value is the item's value."""
    found = []
    for line, name, current, _ in ctx.view.params():
        named = contains(name, item.name) or (bool(norm(name)) and norm(name) in norm(item.name))
        if named and contains(current, item.value):
            found.append(line)
    return found


def _old_shown_as_current(item: Planted, ctx: Context) -> list[str]:
    """State lines that present a superseded value of the parameter as current.

    A value marked as former does not: "(was A)" / "(原为 A)", and the change
    notice's "name changed A → B" / "name 由 A 改为 B" (the change is what it says)."""
    bad = []
    for section, lines in ctx.view.sections.items():
        if section in ("revoked", "actions", "artifacts"):
            continue
        for line in lines:
            if line.startswith(DONE + FAILED + CALLED + ANSWERED):
                continue
            current = CHANGED_FROM.sub(" → ", line)
            for w in WAS:
                current = current.split(w)[0]
            if not contains(current, item.name):
                continue
            olds = [o for o in item.old_values if norm(o) != norm(item.value)]
            if any(contains(current, o) for o in olds) and not contains(current, item.value):
                bad.append(line)
            elif any(contains(current, o) for o in olds) and section != "params":
                bad.append(line)
    return bad


def _line_match(item: Planted, lines: Iterable[str]) -> list[str]:
    hits = []
    for line in lines:
        if item.markers and not line.startswith(item.markers):
            continue
        if all(contains(line, p) for p in item.phrases):
            hits.append(line)
    return hits


def judge(item: Planted, ctx: Context, messages: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether the context carries the item: from the state, or from raw turns it holds."""
    raw = all(message_key(messages[mid]) in ctx.raw_keys for mid in item.turn_ids)
    lines = ctx.view.lines
    showed: list[str] = []
    if item.kind in ("parameter_current", "parameter_superseded_marked"):
        current = _param_current(item, ctx)
        stale = _old_shown_as_current(item, ctx)
        if item.kind == "parameter_current":
            ok_state = bool(current)
            ok = ok_state or raw
        else:
            ok_state = bool(current) and not stale
            ok = (bool(current) or raw) and not stale
        showed = stale or [p[0] for p in ctx.view.params() if contains(p[1], item.name)]
    elif item.kind == "todo":
        hits = []
        for line in _line_match(item, lines):
            tail = next((line.split(m, 1)[1] for m in MISSING if m in line), None)
            if tail is not None and contains(tail, item.prerequisite):
                hits.append(line)
        ok_state = bool(hits)
        ok = ok_state or raw
        showed = (
            hits or _line_match(item, lines) or closest_lines(ctx.view.section("todos"), item.text)
        )
    elif item.kind == "answered":
        stale = _line_match(item, lines)
        ok_state = ok = not stale
        showed = stale
    else:
        hits = _line_match(item, lines)
        ok_state = bool(hits)
        ok = ok_state or raw
        if not hits:
            tool = item.phrases[0] if item.kind.startswith("action") else None
            showed = (
                [line for line in lines if tool in line][:3]
                if tool
                else closest_lines(lines, item.text)
            )
    memory = False
    if not ok and item.kind in MEMORY_CREDIT and ctx.other_lines:
        quoted = contains(ctx.other_blocks, item.text) if item.kind != "action_done" else False
        memory = quoted or any(
            all(contains(line, p) for p in item.phrases) for line in ctx.other_lines
        )
        ok = memory
    return {
        "ok": ok,
        "via_state": ok_state,
        "via_raw": raw,
        "via_other_block": memory,
        "showed": showed[:3],
    }


def judge_context(session: Session, ctx: Context, turns: int) -> dict[str, Any]:
    by_id = {m["id"]: m for m in session.messages}
    items = []
    for item in session.planted:
        verdict = judge(item, ctx, by_id)
        items.append(
            {
                "key": item.key,
                "kind": item.kind,
                "text": item.text,
                "planted_at": item.planted_at,
                "age": turns - item.planted_at,
                **verdict,
            }
        )
    # Judged per distinct phrase: a sign-off said five times is one noise item.
    phrases = list(dict.fromkeys(n.phrase for n in session.noise))
    noise_state = [p for p in phrases if leaked(p, ctx.state_norm)]
    noise_system = [p for p in phrases if leaked(p, ctx.system_norm)]
    noise_all = [p for p in phrases if leaked(p, ctx.all_norm)]
    return {
        "items": items,
        "noise_total": len(phrases),
        "noise_in_state": noise_state,
        "noise_in_system": noise_system,
        "noise_in_context": noise_all,
        "tokens": ctx.tokens,
    }


def recall_by_kind(items: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {k: {"n": 0, "ok": 0} for k in (*RECALL_KINDS, "answered")}
    for item in items:
        out[item["kind"]]["n"] += 1
        out[item["kind"]]["ok"] += int(item["ok"])
    return out


def consistency(events: Sequence[Mapping[str, Any]], seq_text: Mapping[int, str]) -> dict[str, Any]:
    """Changes between consecutive rendered states that no turn explains."""
    violations: list[dict[str, Any]] = []
    info: Counter[str] = Counter()
    for prev, cur in itertools.pairwise(events):
        a = StateView.parse(prev.get("rendered_state") or "")
        b = StateView.parse(cur.get("rendered_state") or "")
        covered = norm(" ".join(seq_text.get(s, "") for s in cur.get("turn_seqs") or ()))
        where = {"from_event": prev["id"], "to_event": cur["id"]}
        kept = set(b.section("constraints")) | set(b.section("revoked"))
        for line in a.section("constraints"):
            base = line.removesuffix(" (!)")
            if line not in kept and not any(base in k for k in kept):
                violations.append({"type": "constraint_lost", "line": line, **where})
        for line in a.section("pinned"):
            if line not in b.section("pinned"):
                violations.append({"type": "pinned_lost", "line": line, **where})
        after = {norm(name): (line, value) for line, name, value, _ in b.params()}
        for line, name, value, _ in a.params():
            if norm(name) not in after:
                info["param_line_dropped"] += 1
                continue
            new_line, new_value = after[norm(name)]
            if norm(new_value) != norm(value) and norm(new_value) not in covered:
                violations.append(
                    {
                        "type": "param_changed_without_turn",
                        "before": line,
                        "after": new_line,
                        **where,
                    }
                )
        still = set(b.section("pending_header"))
        answered = " ".join(line for line in b.lines if line.startswith(ANSWERED))
        for line in a.section("pending_header"):
            body = line
            for marker in PENDING:
                body = body.removeprefix(marker)
            if line not in still and not contains(answered, body[:60]):
                violations.append({"type": "pending_lost", "line": line, **where})
        done_before = {x for x in a.lines if x.startswith(DONE)}
        done_after = {x.split(" → ")[0] for x in b.lines if x.startswith(DONE)}
        info["done_lines_dropped"] += sum(
            1 for x in done_before if x.split(" → ")[0] not in done_after
        )
    return {
        "pairs": max(0, len(events) - 1),
        "violations": violations,
        "counts": dict(Counter(v["type"] for v in violations)),
        "info": dict(info),
    }


def in_state_json(item: Planted, state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Where a lost item sits in the stored task state (status, activity): decayed
    below the render threshold, closed, or never extracted (empty)."""
    found = []
    if item.kind.startswith("action"):
        for a in state.get("actions", []):
            blob = json.dumps(a, ensure_ascii=False)
            if a.get("tool") == item.phrases[0] and all(contains(blob, p) for p in item.phrases):
                found.append(
                    {"status": a.get("status"), "activity": a.get("activity"), "seq": a.get("seq")}
                )
    elif item.kind in ("todo", "pending", "constraint", "high_stakes"):
        pool = {"todo": "todos", "pending": "pending", "constraint": "constraints"}.get(
            item.kind, "high_stakes"
        )
        for x in state.get(pool, []):
            if all(contains(x.get("text", ""), p) for p in item.phrases):
                found.append(
                    {
                        "text": x.get("text"),
                        "status": x.get("status"),
                        "activity": x.get("activity"),
                    }
                )
    elif item.kind.startswith("parameter"):
        for x in state.get("parameters", []):
            if contains(x.get("name", ""), item.name):
                found.append({"value": x.get("value"), "history": x.get("history")})
    return found

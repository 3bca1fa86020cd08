"""Recall of planted facts through compression, against the real service.

    python -m bench.recall --out recall.json [--sessions N --turns T --min-turns M
                                              --budget 2500 --seed S --window 8192
                                              --llm-base-url URL --llm-model M
                                              --plot FILE.png --concurrency C]

Generates long agent sessions (``bench/sessions.py``: English and Chinese, tool
calls with long JSON results, failures, chit-chat, changed parameters,
unanswered confirmations…, each with its ground truth), starts ``mnemo serve``
on a fresh embedded Postgres, and posts every session message by message as an
agent would, waiting for the compression a post schedules. Every 10 turns it
records the context size at ``--budget``; at the end it judges the context:

* planted-item recall by type — from the task state (the system message) by
  its markers ("Done …", "Pending: …", "- name: value (was …)"), or from the
  raw recent turns the context still carries;
* noise leaked — chit-chat found in the state, and anywhere in the context;
* tokens — context vs the full history, never above the budget, flat with length;
* consistency across compressions — between consecutive events' rendered
  states: constraints or pinned facts lost, a parameter's value changed with
  no turn saying so, a pending confirmation gone without an answer;
* compression time — the events' ``duration_ms``, and in-process: rule
  extraction + merge + render of a ~16k-token history (median of runs).

The same figures are computed for two baselines on the same sessions, without
the compressor: the full history, and truncation to the budget (the newest
turns that fit, a tool call never split from its results).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import statistics
import sys
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.compression.extract.rules import RuleExtractor
from app.compression.merge import merge
from app.compression.render import LABELS, render
from app.compression.state import TaskState
from app.context.pack import RecentTurn, pack
from app.core.tokens import count_message_tokens, count_tokens
from app.core.turns import TurnView
from bench._service import Service, running_service
from bench.latency import machine
from bench.sessions import RECALL_KINDS, Language, Planted, Session, generate, plan_sessions

TARGETS = {
    "recall": ("≥", 0.95),
    "noise_in_state": ("≤", 0.05),
    "max_context_over_budget": ("≤", 0.0),
    "compress_16k_ms": ("≤", 100.0),
    "compress_16k_speech_ms": ("≤", 100.0),
    "flat_growth_share": ("≤", 0.05),
}
DEFAULTS = {"sessions": 8, "turns": 300, "min_turns": 60, "budget": 2500, "window": 8192}
CHECKPOINT_EVERY = 10
WAIT_TIMEOUT_S = 120.0
LLM_WAIT_TIMEOUT_S = 600.0
POLL_S = 0.02
# The share of the context budget the worker renders the state into (app/services/compression.py).
STATE_SHARE = 0.6
TIMING_TOKENS = 16_000
TIMING_RUNS = 7

# Markers and headers of the rendered state (app/compression/render.py LABELS).
DONE = ("Done ", "已完成 ")
FAILED = ("Failed ", "失败 ")
CALLED = ("Called ", "已调用 ")
PENDING = ("Pending: ", "待确认：")
WAS = (" (was ", " (原为 ")
MISSING = (" (missing: ", "（缺少：")
ANSWERED = ("- Answered: ", "- 已答复：")


# ----------------------------------------------------------------- text helpers


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
class StateView:
    """A rendered task state split into its sections (header → lines)."""

    lines: list[str]
    sections: dict[str, list[str]]

    @classmethod
    def parse(cls, text: str) -> StateView:
        headers = {}
        for lab in LABELS.values():
            for key in ("constraints", "pinned", "preferences", "actions", "params", "artifacts"):
                headers[lab[key]] = key
            for key in ("decisions", "facts", "pending_header", "todos", "blockers", "revoked"):
                headers[lab[key]] = key
        sections: dict[str, list[str]] = defaultdict(list)
        current = "head"
        lines = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            if line in headers:
                current = headers[line]
                continue
            lines.append(line)
            sections[current].append(line)
        return cls(lines=lines, sections=dict(sections))

    def section(self, name: str) -> list[str]:
        return self.sections.get(name, [])

    def params(self) -> list[tuple[str, str, str, str]]:
        """(line, name, current value, superseded part) of each parameter line."""
        out = []
        for line in self.section("params"):
            body = line[2:] if line.startswith("- ") else line
            cut = min((i for i in (body.find(": "), body.find("：")) if i >= 0), default=-1)
            if cut < 0:
                continue
            name, rest = body[:cut], body[cut + (2 if body[cut] == ":" else 1) :]
            was = min((i for i in (rest.find(w) for w in WAS) if i >= 0), default=len(rest))
            out.append((line, name, rest[:was], rest[was:]))
        return out


# ----------------------------------------------------------------- judging a context


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


STATE_TITLES = ("## Task state", "## 任务状态")
# Kinds whose wording alone carries them, so a quote in another block (long-term
# memory episodes) counts; pending items and parameters need the state's markers.
MEMORY_CREDIT = ("constraint", "high_stakes", "todo", "action_done", "action_failed")


def split_system(system: str) -> tuple[str, str]:
    """(task-state block, the other blocks) of the context's system message."""
    blocks = re.split(r"\n\n(?=## )", system)
    state = [b for b in blocks if b.startswith(STATE_TITLES)]
    other = [b for b in blocks if not b.startswith(STATE_TITLES)]
    return "\n\n".join(state), "\n\n".join(other)


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
    """State lines that present a superseded value of the parameter as current."""
    bad = []
    for section, lines in ctx.view.sections.items():
        if section in ("revoked", "actions", "artifacts"):
            continue
        for line in lines:
            if line.startswith(DONE + FAILED + CALLED + ANSWERED):
                continue
            current = line
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


def _share(ok: int, n: int) -> float | None:
    return round(ok / n, 4) if n else None


# ----------------------------------------------------------------- baselines


def api_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as a chat API sees it (client id and flags dropped)."""
    keep = ("role", "content", "tool_calls", "tool_call_id", "name")
    return {k: message[k] for k in keep if k in message}


def truncated(messages: Sequence[dict[str, Any]], tokens: Sequence[int], budget: int) -> Context:
    """The newest messages that fit the budget, tool calls kept with their results."""
    recent = [
        RecentTurn(message=api_message(m), tokens=t) for m, t in zip(messages, tokens, strict=True)
    ]
    packed = pack(blocks=[], recent=recent, max_tokens=budget, count=count_tokens)
    return Context(state="", messages=packed.messages, tokens=packed.tokens)


def full_history(messages: Sequence[dict[str, Any]], tokens: Sequence[int]) -> Context:
    return Context(state="", messages=[api_message(m) for m in messages], tokens=sum(tokens))


# ----------------------------------------------------------------- consistency


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


# ----------------------------------------------------------------- driving the service


@dataclass
class Run:
    session: Session
    acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    waits: int = 0
    wait_s: float = 0.0
    post_s: float = 0.0


async def wait_idle(client: httpx.AsyncClient, session_id: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = await client.get(f"/v1/sessions/{session_id}")
        r.raise_for_status()
        if r.json()["pending_jobs"] == 0:
            return
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"{session_id}: compression still pending after {timeout_s:.0f} s")


async def drive(
    client: httpx.AsyncClient, session: Session, budget: int, wait_timeout_s: float
) -> Run:
    """Post the session message by message; checkpoint the context every 10 turns."""
    run = Run(session)
    sid = session.session_id
    tokens: list[int] = []
    for i, message in enumerate(session.messages):
        began = time.perf_counter()
        r = await client.post(
            f"/v1/sessions/{sid}/turns", json={"user_id": session.user_id, "messages": [message]}
        )
        run.post_s += time.perf_counter() - began
        if r.status_code != 201:
            raise RuntimeError(f"{sid}: POST turn {i} → {r.status_code} {r.text[:300]}")
        ack = r.json()
        run.acks[message["id"]] = ack["turns"][0]
        tokens.append(ack["turns"][0]["tokens"])
        if ack["compression_scheduled"]:
            began = time.perf_counter()
            await wait_idle(client, sid, wait_timeout_s)
            run.waits += 1
            run.wait_s += time.perf_counter() - began
        last = i == len(session.messages) - 1
        if (i + 1) % CHECKPOINT_EVERY == 0 or last:
            if last:
                await wait_idle(client, sid, wait_timeout_s)
            ctx = (
                await client.get(f"/v1/sessions/{sid}/context", params={"max_tokens": budget})
            ).json()
            blocks = {b["kind"]: b["tokens"] for b in ctx["blocks"]}
            trunc = truncated(session.messages[: i + 1], tokens, budget)
            run.checkpoints.append(
                {
                    "turn": i + 1,
                    "context_tokens": ctx["tokens"],
                    "state_tokens": blocks.get("task_state", 0),
                    "recent_tokens": blocks.get("recent", 0),
                    "full_history_tokens": ctx["full_history_tokens"],
                    "truncation_tokens": trunc.tokens,
                    "recent_messages": sum(m["role"] != "system" for m in ctx["messages"]),
                    "truncation_messages": len(trunc.messages),
                    "state_version": ctx["state_version"],
                }
            )
            if last:
                run.final = ctx
    run.state = (await client.get(f"/v1/sessions/{sid}/state")).json().get("state") or {}
    listed = (await client.get(f"/v1/sessions/{sid}/events", params={"limit": 200})).json()
    for summary in sorted(listed["events"], key=lambda e: e["id"]):
        detail = (await client.get(f"/v1/sessions/{sid}/events/{summary['id']}")).json()
        run.events.append(detail)
    return run


async def drive_all(
    service: Service, sessions: Sequence[Session], args: argparse.Namespace
) -> list[Run]:
    wait_timeout = LLM_WAIT_TIMEOUT_S if args.llm_base_url else WAIT_TIMEOUT_S
    gate = asyncio.Semaphore(args.concurrency)

    async def one(session: Session) -> Run:
        async with gate, httpx.AsyncClient(base_url=service.base_url, timeout=60.0) as client:
            began = time.perf_counter()
            run = await drive(client, session, args.budget, wait_timeout)
            print(
                f"  {session.session_id}: {len(session.messages)} turns, "
                f"{len(run.events)} compressions, {time.perf_counter() - began:.1f} s",
                file=sys.stderr,
            )
            return run

    return list(await asyncio.gather(*(one(s) for s in sessions)))


# ----------------------------------------------------------------- analysis


def analyse(run: Run, budget: int) -> dict[str, Any]:
    s = run.session
    turns = len(s.messages)
    tokens = [run.acks[m["id"]]["tokens"] for m in s.messages]
    final = run.final
    system = next((m["content"] for m in final["messages"] if m["role"] == "system"), "")
    raw = [m for m in final["messages"] if m["role"] != "system"]
    state_block, other_blocks = split_system(system or "")
    mnemo = Context(
        state=state_block, messages=raw, tokens=final["tokens"], other_blocks=other_blocks
    )
    contexts = {
        "mnemo": mnemo,
        "full": full_history(s.messages, tokens),
        "truncation": truncated(s.messages, tokens, budget),
    }
    judged = {name: judge_context(s, ctx, turns) for name, ctx in contexts.items()}
    seq_text = {}
    for m in s.messages:
        text = m.get("content") or ""
        if m.get("tool_calls"):
            text += json.dumps(m["tool_calls"], ensure_ascii=False)
        seq_text[run.acks[m["id"]]["seq"]] = text
    durations = [float(e["duration_ms"]) for e in run.events if e.get("duration_ms") is not None]
    through = state_through(state_block)
    seqs = {m["id"]: run.acks[m["id"]]["seq"] for m in s.messages}
    for item in judged["mnemo"]["items"]:
        planted = next(p for p in s.planted if p.key == item["key"])
        item["seq"] = seqs[planted.turn_ids[0]]
        if not item["ok"]:
            # Still live (not compressed yet) but pushed out of the packed recent turns,
            # or compressed and then not shown by the state.
            item["cause"] = "live_not_packed" if item["seq"] > through else "compressed_not_shown"
            item["in_state_json"] = in_state_json(planted, run.state)
    return {
        "session_id": s.session_id,
        "language": s.language,
        "scenario": s.scenario,
        "turns": turns,
        "seed": s.seed,
        "full_history_tokens": final["full_history_tokens"],
        "context_tokens": final["tokens"],
        "state_language": state_language(state_block),
        "state_through_seq": through,
        "context_blocks": final["blocks"],
        "max_context_tokens": max(c["context_tokens"] for c in run.checkpoints),
        "over_budget_checkpoints": sum(c["context_tokens"] > budget for c in run.checkpoints),
        "compression_ratio": round(final["full_history_tokens"] / max(1, final["tokens"]), 2),
        "judged": judged,
        "recall": {name: recall_by_kind(j["items"]) for name, j in judged.items()},
        "compressions": len(run.events),
        "triggers": dict(Counter(e["trigger"] for e in run.events)),
        "extractors": dict(Counter(e["extractor"] for e in run.events)),
        "fallbacks": [e["fallback_reason"] for e in run.events if e.get("fallback_reason")],
        "duration_ms": durations,
        "event_input_tokens": [e["input_tokens"] for e in run.events],
        "event_output_tokens": [e["output_tokens"] for e in run.events],
        "consistency": consistency(run.events, seq_text),
        "checkpoints": run.checkpoints,
        "final_state": state_block,
        "final_state_json": run.state,
        "final_other_blocks": other_blocks,
        "client": {
            "posts_s": round(run.post_s, 2),
            "compression_waits": run.waits,
            "wait_s": round(run.wait_s, 2),
        },
        "ground_truth": s.ground_truth(),
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


def state_through(state: str) -> int:
    """The last turn seq the rendered state covers (-1: no state yet)."""
    m = re.match(r"## (?:Task state \(through turn|任务状态（截至第) (\d+)", state)
    return int(m.group(1)) if m else -1


def state_language(state: str) -> str | None:
    if state.startswith("## 任务状态"):
        return "zh"
    return "en" if state.startswith("## Task state") else None


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _pct(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def overall(cases: Sequence[Mapping[str, Any]], budget: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("mnemo", "full", "truncation"):
        items = [i for c in cases for i in c["judged"][name]["items"] if i["kind"] != "answered"]
        answered = [i for c in cases for i in c["judged"][name]["items"] if i["kind"] == "answered"]
        noise_n = sum(c["judged"][name]["noise_total"] for c in cases)
        tokens = [c["judged"][name]["tokens"] for c in cases]
        full = [c["full_history_tokens"] for c in cases]
        if name == "mnemo":
            max_tokens = max(c["max_context_tokens"] for c in cases)
            over = sum(c["over_budget_checkpoints"] for c in cases)
        else:
            key = "full_history_tokens" if name == "full" else "truncation_tokens"
            max_tokens = max(cp[key] for c in cases for cp in c["checkpoints"])
            over = sum(cp[key] > budget for c in cases for cp in c["checkpoints"])
        kinds = recall_by_kind(i for c in cases for i in c["judged"][name]["items"])
        out[name] = {
            "recall": _share(sum(i["ok"] for i in items), len(items)),
            "items": len(items),
            "recall_by_kind": {k: _share(v["ok"], v["n"]) for k, v in kinds.items()},
            "n_by_kind": {k: v["n"] for k, v in kinds.items()},
            "answered_still_pending": sum(not i["ok"] for i in answered),
            "answered": len(answered),
            "noise_in_state": (
                _share(sum(len(c["judged"][name]["noise_in_state"]) for c in cases), noise_n)
                if name == "mnemo"
                else None
            ),
            "noise_in_system": (
                _share(sum(len(c["judged"][name]["noise_in_system"]) for c in cases), noise_n)
                if name == "mnemo"
                else None
            ),
            "recalled_via": dict(
                Counter(
                    "state" if i["via_state"] else "raw" if i["via_raw"] else "other_block"
                    for i in items
                    if i["ok"]
                )
            ),
            "noise_in_context": _share(
                sum(len(c["judged"][name]["noise_in_context"]) for c in cases), noise_n
            ),
            "noise_phrases": noise_n,
            "mean_context_tokens": round(statistics.fmean(tokens), 1),
            "max_context_tokens": max_tokens,
            "over_budget_checkpoints": over,
            "compression_ratio": round(sum(full) / max(1, sum(tokens)), 2),
        }
    durations = [d for c in cases for d in c["duration_ms"]]
    out["events"] = {
        "compressions": sum(c["compressions"] for c in cases),
        "duration_ms_p50": _round(_pct(durations, 50), 2),
        "duration_ms_p95": _round(_pct(durations, 95), 2),
        "duration_ms_max": _round(max(durations), 2) if durations else None,
        "triggers": dict(sum((Counter(c["triggers"]) for c in cases), Counter())),
        "extractors": dict(sum((Counter(c["extractors"]) for c in cases), Counter())),
    }
    out["consistency"] = {
        "pairs": sum(c["consistency"]["pairs"] for c in cases),
        "violations": dict(sum((Counter(c["consistency"]["counts"]) for c in cases), Counter())),
        "info": dict(sum((Counter(c["consistency"]["info"]) for c in cases), Counter())),
    }
    out["state_language_mismatch"] = [
        f"{c['session_id']}: state rendered in {c['state_language']}"
        for c in cases
        if c["state_language"] is not None and c["state_language"] != c["language"]
    ]
    lost = [i for c in cases for i in c["judged"]["mnemo"]["items"] if not i["ok"]]
    out["miss_causes"] = dict(Counter(i.get("cause", "?") for i in lost if i["kind"] != "answered"))
    out["flatness"] = flatness(cases, budget)
    no_recent = [cp for c in cases for cp in c["checkpoints"] if cp["turn"] >= 50]
    out["checkpoints_without_recent_turns"] = {
        "mnemo": sum(cp["recent_messages"] == 0 for cp in no_recent),
        "truncation": sum(cp["truncation_messages"] == 0 for cp in no_recent),
        "of": len(no_recent),
    }
    return out


def flatness(cases: Sequence[Mapping[str, Any]], budget: int) -> dict[str, Any]:
    """Mean tokens at turns 50–100 vs the last third of sessions of ≥ 150 turns (pooled)."""
    early: dict[str, list[int]] = defaultdict(list)
    late: dict[str, list[int]] = defaultdict(list)
    keys = ("context_tokens", "state_tokens", "full_history_tokens", "truncation_tokens")
    for c in cases:
        if c["turns"] < 150:
            continue
        for cp in c["checkpoints"]:
            for key in keys:
                if 50 <= cp["turn"] <= 100:
                    early[key].append(cp[key])
                elif cp["turn"] >= c["turns"] * 2 / 3:
                    late[key].append(cp[key])
    if not early["context_tokens"] or not late["context_tokens"]:
        return {"growth_share_of_budget": None}
    means = {
        key: {
            "turns_50_100": round(statistics.fmean(early[key])),
            "last_third": round(statistics.fmean(late[key])),
        }
        for key in keys
    }
    growth = means["context_tokens"]["last_third"] - means["context_tokens"]["turns_50_100"]
    return {"mean_tokens": means, "growth_share_of_budget": round(growth / budget, 4)}


def misses(cases: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every planted item the Mnemo context lost, with what it showed instead."""
    out = []
    for c in cases:
        for item in c["judged"]["mnemo"]["items"]:
            if not item["ok"]:
                out.append({"session": c["session_id"], "turns": c["turns"], **item})
    return out


# ----------------------------------------------------------------- in-process timing


def _timing_history(seed: int | str, language: Language, speech_only: bool) -> list[Any]:
    """~16k tokens of generated turns as TurnViews (optionally user/assistant text only)."""
    turns: list[TurnView] = []
    total = 0
    index = 90
    while total < TIMING_TOKENS:
        for m in generate(seed=seed, index=index, turns=500, language=language).messages:
            if speech_only and (m["role"] == "tool" or m.get("tool_calls")):
                continue
            if total >= TIMING_TOKENS:
                break
            total += count_message_tokens(m)
            turns.append(
                TurnView(
                    seq=len(turns),
                    role=m["role"],
                    content=m.get("content"),
                    tool_calls=m.get("tool_calls"),
                    tool_call_id=m.get("tool_call_id"),
                    emphasized=bool(m.get("emphasized")),
                )
            )
        index += 1
    return turns


async def _time_compression(
    turns: Sequence[Any], language: Language, budget: int
) -> list[tuple[float, float, float]]:
    """(extract, merge, render) seconds of each run, after one warm-up run."""
    extractor = RuleExtractor()
    samples = []
    for _ in range(TIMING_RUNS + 1):
        t0 = time.perf_counter()
        units = await extractor.extract(turns, TaskState())
        t1 = time.perf_counter()
        state = merge(TaskState(), units, through_seq=turns[-1].seq, language=language)
        t2 = time.perf_counter()
        render(state, language=language, max_tokens=int(budget * STATE_SHARE))
        samples.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    return samples[1:]


def standalone_timing(seed: int | str, budget: int) -> dict[str, Any]:
    """Rule extraction + merge + render of ~16k-token histories, in-process (medians).

    Agent sessions (tool results make most of the tokens) and speech only (every
    token goes through the sentence rules: the slow case), in both languages.
    """
    out: dict[str, Any] = {}
    cases: list[tuple[str, Language, bool]] = [
        ("en", "en", False),
        ("zh", "zh", False),
        ("en_speech", "en", True),
        ("zh_speech", "zh", True),
    ]
    for name, language, speech_only in cases:
        turns = _timing_history(seed, language, speech_only)
        samples = asyncio.run(_time_compression(turns, language, budget))
        totals = [sum(s) * 1000 for s in samples]
        out[name] = {
            "history_turns": len(turns),
            "runs": TIMING_RUNS,
            "median_ms": round(statistics.median(totals), 2),
            "min_ms": round(min(totals), 2),
            "max_ms": round(max(totals), 2),
            "median_extract_ms": round(statistics.median(s[0] for s in samples) * 1000, 2),
            "median_merge_ms": round(statistics.median(s[1] for s in samples) * 1000, 2),
            "median_render_ms": round(statistics.median(s[2] for s in samples) * 1000, 2),
        }
    out["median_ms"] = max(out["en"]["median_ms"], out["zh"]["median_ms"])
    out["speech_median_ms"] = max(out["en_speech"]["median_ms"], out["zh_speech"]["median_ms"])
    return out


# ----------------------------------------------------------------- reporting


def headline(result: Mapping[str, Any]) -> dict[str, float]:
    o = result["overall"]
    return {
        "recall": o["mnemo"]["recall"] or 0.0,
        "noise_in_state": o["mnemo"]["noise_in_state"] or 0.0,
        "max_context_over_budget": float(
            max(0, o["mnemo"]["max_context_tokens"] - result["parameters"]["budget"])
        ),
        "compress_16k_ms": result["timing"]["median_ms"],
        "compress_16k_speech_ms": result["timing"]["speech_median_ms"],
        "flat_growth_share": o["flatness"]["growth_share_of_budget"] or 0.0,
    }


def verdicts(figures: Mapping[str, float]) -> dict[str, bool]:
    return {
        k: (figures[k] <= v if op == "≤" else figures[k] >= v) for k, (op, v) in TARGETS.items()
    }


def _f(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def print_report(result: Mapping[str, Any]) -> None:
    p, o = result["parameters"], result["overall"]
    print(
        f"\nMnemo recall — {p['sessions']} sessions of {p['min_turns']}–{p['turns']} turns, "
        f"budget {p['budget']} tokens, window {p['window']}, extractor "
        f"{'LLM ' + str(p['llm_model']) if p['llm_base_url'] else 'rules'}; "
        f"{result['machine']['cpu_count']} CPUs"
    )
    head = (
        f"{'session':<34}{'turns':>6}{'full tok':>9}{'ctx tok':>8}{'trunc':>7}{'ratio':>7}"
        f"{'recall M':>9}{'recall T':>9}{'noise st':>9}{'comp':>5}{'ms p50':>8}{'incons':>7}"
    )
    print(head)
    print("-" * len(head))
    for c in result["cases"]:
        j = c["judged"]
        rm = [i for i in j["mnemo"]["items"] if i["kind"] != "answered"]
        rt = [i for i in j["truncation"]["items"] if i["kind"] != "answered"]
        print(
            f"{c['session_id']:<34}{c['turns']:>6}{c['full_history_tokens']:>9}"
            f"{c['context_tokens']:>8}{j['truncation']['tokens']:>7}{c['compression_ratio']:>7.1f}"
            f"{sum(i['ok'] for i in rm) / len(rm):>9.2f}{sum(i['ok'] for i in rt) / len(rt):>9.2f}"
            f"{len(j['mnemo']['noise_in_state']):>5}/{j['mnemo']['noise_total']:<3}"
            f"{c['compressions']:>5}{_f(_pct(c['duration_ms'], 50), '.1f'):>8}"
            f"{len(c['consistency']['violations']):>7}"
        )
    print()
    head = (
        f"{'context':<14}{'recall':>8}{'noise st':>9}{'noise sys':>10}{'noise ctx':>10}"
        f"{'mean tok':>9}"
        f"{'max tok':>9}{'>budget':>8}{'ratio':>8}{'stale pend':>11}"
    )
    print(head)
    print("-" * len(head))
    for name, label in (("mnemo", "Mnemo"), ("full", "full history"), ("truncation", "truncation")):
        r = o[name]
        print(
            f"{label:<14}{_f(r['recall']):>8}{_f(r['noise_in_state']):>9}"
            f"{_f(r['noise_in_system']):>10}"
            f"{_f(r['noise_in_context']):>10}{r['mean_context_tokens']:>9.0f}"
            f"{r['max_context_tokens']:>9}{r['over_budget_checkpoints']:>8}"
            f"{r['compression_ratio']:>8.1f}{r['answered_still_pending']:>7}/{r['answered']}"
        )
    print()
    head = f"{'planted item':<30}{'n':>5}{'Mnemo':>8}{'full':>8}{'trunc':>8}"
    print(head)
    print("-" * len(head))
    for kind in RECALL_KINDS:
        n = o["mnemo"]["n_by_kind"][kind]
        print(
            f"{kind:<30}{n:>5}{_f(o['mnemo']['recall_by_kind'][kind]):>8}"
            f"{_f(o['full']['recall_by_kind'][kind]):>8}"
            f"{_f(o['truncation']['recall_by_kind'][kind]):>8}"
        )
    ev, t = o["events"], result["timing"]
    print(
        f"\ncompressions: {ev['compressions']} (triggers {ev['triggers']}, extractors "
        f"{ev['extractors']}); duration_ms p50 {_f(ev['duration_ms_p50'])}, "
        f"p95 {_f(ev['duration_ms_p95'])}, max {_f(ev['duration_ms_max'])}"
    )
    print(
        f"in-process rules+merge+render of ~{TIMING_TOKENS // 1000}k tokens, median of "
        f"{TIMING_RUNS}: "
        + ", ".join(f"{k} {v['median_ms']} ms" for k, v in t.items() if isinstance(v, dict))
    )
    cons = o["consistency"]
    print(
        f"consistency over {cons['pairs']} consecutive compressions: violations "
        f"{cons['violations'] or 'none'}; info {cons['info']}"
    )
    print(
        f"Mnemo misses by cause: {o['miss_causes'] or 'none'}; state language mismatches: "
        f"{o['state_language_mismatch'] or 'none'}"
    )
    fl = o["flatness"].get("mean_tokens")
    if fl:
        print(
            "mean tokens, turns 50–100 → last third (sessions ≥ 150 turns): "
            + ", ".join(
                f"{k.removesuffix('_tokens')} {v['turns_50_100']} → {v['last_third']}"
                for k, v in fl.items()
            )
        )
    nr = o["checkpoints_without_recent_turns"]
    print(
        f"checkpoints (turn ≥ 50) whose context holds no raw turn at all: Mnemo {nr['mnemo']}, "
        f"truncation {nr['truncation']} of {nr['of']} (the newest tool result alone exceeds "
        "what is left of the budget, and packing never splits or skips it)"
    )
    print()
    figures, ok = result["figures"], result["meets_target"]
    for key, (op, target) in TARGETS.items():
        mark = "ok  " if ok[key] else "MISS"
        print(f"  {mark} {key:<24} {figures[key]:>10.4g}   target {op} {target:g}")
    print(
        "SUMMARY "
        + " ".join(f"{k}={v:g}" for k, v in figures.items())
        + f" misses={sum(not v for v in ok.values())}"
    )


def plot(result: Mapping[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install '.[bench]')", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, c in enumerate(result["cases"]):
        xs = [cp["turn"] for cp in c["checkpoints"]]
        kw: dict[str, Any] = {"linewidth": 0.8, "alpha": 0.45}
        ax.plot(
            xs,
            [cp["full_history_tokens"] for cp in c["checkpoints"]],
            color="tab:red",
            linestyle="--",
            label="full history" if i == 0 else None,
            **kw,
        )
        ax.plot(
            xs,
            [cp["truncation_tokens"] for cp in c["checkpoints"]],
            color="tab:gray",
            linestyle=":",
            label="truncation" if i == 0 else None,
            **kw,
        )
        ax.plot(
            xs,
            [cp["context_tokens"] for cp in c["checkpoints"]],
            color="tab:blue",
            label="Mnemo context" if i == 0 else None,
            **kw,
        )
        ax.plot(
            xs,
            [cp["state_tokens"] for cp in c["checkpoints"]],
            color="tab:green",
            linewidth=0.8,
            alpha=0.6,
            label="Mnemo task-state block" if i == 0 else None,
        )
    # Bold: the mean over the sessions still running at each checkpoint.
    series = (
        ("full_history_tokens", "tab:red", "--"),
        ("truncation_tokens", "tab:gray", ":"),
        ("context_tokens", "tab:blue", "-"),
        ("state_tokens", "tab:green", "-"),
    )
    for key, color, style in series:
        by_turn: dict[int, list[int]] = defaultdict(list)
        for c in result["cases"]:
            for cp in c["checkpoints"]:
                by_turn[cp["turn"] // CHECKPOINT_EVERY * CHECKPOINT_EVERY].append(cp[key])
        xs = sorted(t for t, v in by_turn.items() if len(v) >= 2)
        ax.plot(
            xs,
            [statistics.fmean(by_turn[t]) for t in xs],
            color=color,
            linestyle=style,
            linewidth=2.6,
        )
    budget = result["parameters"]["budget"]
    ax.axhline(budget, color="black", linewidth=0.8, label=f"budget {budget}")
    ax.set_yscale("log")
    ax.set_xlabel("turns posted")
    ax.set_ylabel("tokens (log scale)")
    ax.set_title(
        f"Context tokens per turn, {len(result['cases'])} sessions (bold: mean of sessions)"
    )
    ax.legend(loc="upper left")
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ----------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.recall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument("--sessions", type=int, default=DEFAULTS["sessions"])
    parser.add_argument("--turns", type=int, default=DEFAULTS["turns"], help="longest session")
    parser.add_argument(
        "--min-turns", type=int, default=DEFAULTS["min_turns"], help="shortest session"
    )
    parser.add_argument("--budget", type=int, default=DEFAULTS["budget"], help="context max_tokens")
    parser.add_argument(
        "--window", type=int, default=DEFAULTS["window"], help="MNEMO_MODEL_WINDOW_TOKENS"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=2, help="sessions driven at once")
    parser.add_argument("--llm-base-url", default=None, help="OpenAI-compatible API: LLM extractor")
    parser.add_argument("--llm-model", default=None)
    parser.add_argument("--plot", type=Path, default=None, help="PNG (default: next to --out)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    if args.sessions < 1:
        parser.error("--sessions must be at least 1")
    if not 50 <= args.min_turns <= args.turns <= 500:
        parser.error("sessions are 50–500 turns: need 50 ≤ --min-turns ≤ --turns ≤ 500")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if args.plot is None:
        args.plot = args.out.with_suffix(".png")
    return args


def service_env(args: argparse.Namespace) -> dict[str, str]:
    import os

    env = {
        "MNEMO_MODEL_WINDOW_TOKENS": str(args.window),
        "MNEMO_CONTEXT_MAX_TOKENS": str(args.budget),
    }
    if args.llm_base_url:
        env["MNEMO_LLM_BASE_URL"] = args.llm_base_url
        if args.llm_model:
            env["MNEMO_LLM_MODEL"] = args.llm_model
        if os.environ.get("MNEMO_LLM_API_KEY"):
            env["MNEMO_LLM_API_KEY"] = os.environ["MNEMO_LLM_API_KEY"]
    return env


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    plan = plan_sessions(
        seed=args.seed, count=args.sessions, min_turns=args.min_turns, max_turns=args.turns
    )
    sessions = [generate(seed=args.seed, index=i, turns=t, language=lang) for i, t, lang in plan]
    print(
        f"{len(sessions)} sessions, {sum(len(s.messages) for s in sessions)} messages; "
        "timing the in-process compressor…",
        file=sys.stderr,
    )
    timing = standalone_timing(args.seed, args.budget)
    env = service_env(args)
    with running_service(extra_env=env) as service:
        print(f"service ready in {service.start_s:.2f} s at {service.base_url}", file=sys.stderr)
        runs = asyncio.run(drive_all(service, sessions, args))
    cases = [analyse(run, args.budget) for run in runs]
    result: dict[str, Any] = {
        "parameters": {
            "sessions": args.sessions,
            "turns": args.turns,
            "min_turns": args.min_turns,
            "budget": args.budget,
            "window": args.window,
            "seed": args.seed,
            "concurrency": args.concurrency,
            "llm_base_url": args.llm_base_url,
            "llm_model": args.llm_model,
            "checkpoint_every": CHECKPOINT_EVERY,
            "service_env": env
            | ({"MNEMO_LLM_API_KEY": "***"} if "MNEMO_LLM_API_KEY" in env else {}),
        },
        "machine": machine(),
        "timing": timing,
        "overall": overall(cases, args.budget),
        "misses": misses(cases),
        "cases": cases,
        "targets": {k: {"op": op, "value": v} for k, (op, v) in TARGETS.items()},
        "notes": [
            "recall: an item counts when the state shows it with its marker, or when the raw "
            "turns that state it are still in the context (baselines have raw turns only).",
            "parameter_superseded_marked: the current value is shown and no older value is "
            "shown as current (it may appear as '(was …)' or under 'No longer applies').",
            "answered: a question the user answered must not be shown as pending "
            "(answered_still_pending); not part of recall.",
            "noise: a chit-chat phrase, or 16 consecutive letters/digits of it (6 for Chinese), "
            "found in the task-state block (noise_in_state), in the whole system message "
            "(noise_in_system: also long-term memories) or anywhere in the context "
            "(noise_in_context).",
            "recalled_via: state = the task-state block with its markers; raw = the raw turns "
            "stating the item are in the context; other_block = quoted in another system "
            "block (long-term memory), credited for constraints, pinned facts, todos and "
            "actions only.",
            "Context tokens are near the budget by construction (recent raw turns fill what "
            "the state leaves); the state block's growth is reported separately.",
        ],
    }
    result["figures"] = headline(result)
    result["meets_target"] = verdicts(result["figures"])
    result["run_time_s"] = round(time.perf_counter() - began, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n")
    print_report(result)
    if not args.no_plot and plot(result, args.plot):
        print(f"wrote {args.plot}", file=sys.stderr)
    print(f"wrote {args.out} in {result['run_time_s']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""From runs to figures: each session judged (``analyse``), then pooled (``overall``:
recall by kind, noise, tokens, flatness with length, consistency), the headline
figures and their targets.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from bench.recall.baselines import full_history, truncated
from bench.recall.driver import Run
from bench.recall.judge import (
    Context,
    consistency,
    in_state_json,
    judge_context,
    recall_by_kind,
)
from bench.recall.rendered import split_system, state_language, state_through

TARGETS = {
    "recall": ("≥", 0.95),
    "noise_in_state": ("≤", 0.05),
    "max_context_over_budget": ("≤", 0.0),
    "compress_16k_ms": ("≤", 100.0),
    "compress_16k_speech_ms": ("≤", 100.0),
    "flat_growth_share": ("≤", 0.05),
}


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
            # or packed while the state contradicts it (an old value shown as current),
            # or compressed and then not shown by the state.
            if item["seq"] <= through:
                item["cause"] = "compressed_not_shown"
            else:
                item["cause"] = "live_state_stale" if item["via_raw"] else "live_not_packed"
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


def share(ok: int, n: int) -> float | None:
    return round(ok / n, 4) if n else None


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def percentile(values: Sequence[float], p: float) -> float | None:
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
            "recall": share(sum(i["ok"] for i in items), len(items)),
            "items": len(items),
            "recall_by_kind": {k: share(v["ok"], v["n"]) for k, v in kinds.items()},
            "n_by_kind": {k: v["n"] for k, v in kinds.items()},
            "answered_still_pending": sum(not i["ok"] for i in answered),
            "answered": len(answered),
            "noise_in_state": (
                share(sum(len(c["judged"][name]["noise_in_state"]) for c in cases), noise_n)
                if name == "mnemo"
                else None
            ),
            "noise_in_system": (
                share(sum(len(c["judged"][name]["noise_in_system"]) for c in cases), noise_n)
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
            "noise_in_context": share(
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
        "duration_ms_p50": rounded(percentile(durations, 50), 2),
        "duration_ms_p95": rounded(percentile(durations, 95), 2),
        "duration_ms_max": rounded(max(durations), 2) if durations else None,
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

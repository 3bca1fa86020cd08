"""tau-bench airline trajectories: does the context keep the ledger an agent needs?

    python -m bench.tau [--budget 1000] [--window 4096] [--split dev|heldout|all]
                        [--out FILE.json] [--misses]

Replays the gpt-4o airline trajectories of ``../shared/data/tau/airline_dev.json``
(tasks 0–24, four trials each; the system prompt is not posted) turn by turn
through the real service with ``MNEMO_MODEL_WINDOW_TOKENS=4096``, compacts, and
reads the context at 1,000 tokens. Ledger checks per session:

* the customer's id is in the context (when the session states it at all);
* every write call that succeeded (``book_reservation``, ``cancel_reservation``,
  ``update_reservation_*``, ``send_certificate``) is shown as done with its key
  id (the reservation id; a booking's comes from its result): on a line marked
  done — the corpus scorer's marker rules (``agent-sessions/score.py``) — that
  names the tool and the id, or as the raw call with its result;
* no failed write is shown as done (more done lines for a tool and id than
  successful calls).

Ledger recall = passed / all checks. Separately: sessions whose newest write
call the context dropped (neither a marked line nor the raw call). The same for
plain truncation to the same budget.

``--split``: tasks 0–19 are the development split we looked at; tasks 20–24 are
held out (never inspected while writing rules) and reported on their own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._replay import Job, mean, replay_all, shared_data, table
from bench.agent_sessions import load_scorer

WRITE_PREFIXES = ("book_", "cancel_", "update_", "send_")
HELDOUT_TASKS = range(20, 25)
TARGET = 0.97


@dataclass(frozen=True)
class Write:
    call_id: str
    tool: str
    key: str | None
    ok: bool
    error: str


def writes(traj: Sequence[Mapping[str, Any]]) -> list[Write]:
    results = {m.get("tool_call_id"): m.get("content") or "" for m in traj if m["role"] == "tool"}
    out = []
    for m in traj:
        for call in m.get("tool_calls") or ():
            name = call["function"]["name"]
            if not name.startswith(WRITE_PREFIXES):
                continue
            args = json.loads(call["function"]["arguments"] or "{}")
            result = results.get(call["id"], "")
            ok = not result.startswith("Error")
            key = args.get("reservation_id")
            if key is None and ok:
                try:
                    key = json.loads(result).get("reservation_id")
                except (ValueError, AttributeError):
                    key = None
            if key is None and name == "send_certificate":
                key = args.get("user_id")
            out.append(Write(call["id"], name, key, ok, "" if ok else result))
    return out


def messages(traj: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The trajectory as an agent would post it: no system prompt, message ids added,
    the corpus's stringified "None" contents of tool-calling turns as null."""
    out = []
    for i, m in enumerate(traj):
        if m["role"] == "system":
            continue
        msg = {k: m[k] for k in ("role", "content", "tool_calls", "tool_call_id", "name") if k in m}
        if msg.get("tool_calls") and msg.get("content") in ("None", ""):
            msg["content"] = None
        msg["id"] = f"m{i:03d}"
        out.append(msg)
    return out


class Judge:
    def __init__(self) -> None:
        sc = load_scorer()
        self.lines = sc._lines
        self.marked = sc._marked
        self.done = sc.DONE_RE

    def done_lines(self, text: str) -> list[str]:
        return [line for line, head in self.lines(text) if self.marked(line, head, self.done)]

    def judge(
        self, text: str, raw: Sequence[Mapping[str, Any]], ws: Sequence[Write], user_id: str | None
    ) -> dict[str, Any]:
        raw_calls = {c["id"] for m in raw for c in m.get("tool_calls") or ()}
        raw_results = {m.get("tool_call_id") for m in raw if m.get("role") == "tool"}
        done = [line.casefold() for line in self.done_lines(text)]

        def on_done_line(w: Write) -> int:
            key = (w.key or "").casefold()
            return sum(1 for line in done if w.tool in line and key in line)

        checks = []
        if user_id:
            checks.append(("user_id", user_id, user_id.casefold() in text.casefold()))
        for w in ws:
            raw_ok = w.call_id in raw_calls and w.call_id in raw_results
            if w.ok:
                checks.append(("write_done", f"{w.tool} {w.key}", raw_ok or on_done_line(w) > 0))
            else:
                # Without a key (a booking that failed has no id yet), any done line for
                # the tool beyond its successful calls would be the failure shown as done.
                successes = sum(
                    1 for o in ws if o.ok and o.tool == w.tool and w.key in (None, o.key)
                )
                checks.append(
                    ("failed_not_done", f"{w.tool} {w.key}", on_done_line(w) <= successes)
                )
        newest_kept = True
        if ws:
            w = ws[-1]
            raw_ok = w.call_id in raw_calls
            key = (w.key or "").casefold()
            shown = any(
                w.tool in line.casefold() and key in line.casefold() for line, _ in self.lines(text)
            )
            newest_kept = raw_ok or shown
        return {"checks": checks, "newest_write_kept": newest_kept, "has_write": bool(ws)}


def stated_user_id(sample: Mapping[str, Any]) -> str | None:
    uid = sample["info"]["task"].get("user_id")
    said = " ".join(
        (m.get("content") or "") + json.dumps(m.get("tool_calls") or "")
        for m in sample["traj"]
        if m["role"] in ("user", "assistant")
    )
    return uid if uid and uid in said else None


PENDING_LINE = ("Pending:", "待确认：")


def summarise(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    checks = [c for r in results for c in r["checks"]]
    by_kind: dict[str, list[int]] = {}
    for kind, _, ok in checks:
        by_kind.setdefault(kind, [0, 0])
        by_kind[kind][0] += int(ok)
        by_kind[kind][1] += 1
    with_writes = [r for r in results if r["has_write"]]
    pending = [r["pending_lines"] for r in results if "pending_lines" in r]
    return {
        "mean_pending_lines": mean(pending) if pending else 0.0,
        "ledger_recall": sum(ok for *_, ok in checks) / len(checks) if checks else 1.0,
        "checks": len(checks),
        "by_kind": by_kind,
        "newest_write_dropped": sum(not r["newest_write_kept"] for r in with_writes),
        "sessions_with_writes": len(with_writes),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tau", description=__doc__)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--split", choices=("dev", "heldout", "all"), default="all")
    parser.add_argument("--limit", type=int, default=None, help="first N sessions only")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--misses", action="store_true")
    args = parser.parse_args(argv)
    data = json.loads(shared_data("tau", "airline_dev.json").read_text(encoding="utf-8"))
    if args.split != "all":
        held = args.split == "heldout"
        data = [s for s in data if (s["task_id"] in HELDOUT_TASKS) == held]
    data = data[: args.limit] if args.limit else data
    began = time.perf_counter()
    jobs = [
        Job(
            f"tau-{s['task_id']:02d}-{s['trial']}",
            s["info"]["task"]["user_id"],
            messages(s["traj"]),
        )
        for s in data
    ]
    env = {"MNEMO_MODEL_WINDOW_TOKENS": str(args.window)}
    replayed = replay_all(jobs, budget=args.budget, env=env, concurrency=args.concurrency)
    judge = Judge()
    per_split: dict[str, dict[str, list[Any]]] = {}
    rows: list[tuple[Any, ...]] = []
    detail: list[dict[str, Any]] = []
    for s, r in zip(data, replayed, strict=True):
        ws = writes(s["traj"])
        uid = stated_user_id(s)
        m = judge.judge(r.context_text, r.messages, ws, uid)
        # Not judged, only counted: items the context says still await the user
        # (agent questions the conversation moved past should have expired).
        m["pending_lines"] = sum(
            line.startswith(PENDING_LINE) for line in r.context_text.splitlines()
        )
        t = judge.judge(r.truncation_text, r.truncation_messages, ws, uid)
        split = "heldout" if s["task_id"] in HELDOUT_TASKS else "dev"
        per_split.setdefault(split, {"mnemo": [], "truncation": []})
        per_split[split]["mnemo"].append(m)
        per_split[split]["truncation"].append(t)
        mr = sum(ok for *_, ok in m["checks"]) / max(1, len(m["checks"]))
        tr = sum(ok for *_, ok in t["checks"]) / max(1, len(t["checks"]))
        rows.append(
            (
                r.name,
                r.history_tokens,
                r.context_tokens,
                r.state_tokens,
                len(ws),
                mr,
                "" if m["newest_write_kept"] else "DROP",
                tr,
            )
        )
        detail.append(
            {
                "name": r.name,
                "context": r.context_text,
                "mnemo": m,
                "truncation": t,
                "tokens": r.context_tokens,
                "state_tokens": r.state_tokens,
            }
        )
    print(
        table(
            rows, ("session", "history", "ctx tok", "state", "writes", "ledger", "newest", "trunc")
        )
    )
    print()
    for split, res in sorted(per_split.items()):
        for label in ("mnemo", "truncation"):
            s = summarise(res[label])
            kinds = ", ".join(f"{k} {p}/{n}" for k, (p, n) in s["by_kind"].items())
            print(
                f"{split:<8} {label:<11} ledger recall {s['ledger_recall']:.3f} over "
                f"{s['checks']} checks ({kinds}); newest write dropped in "
                f"{s['newest_write_dropped']} of {s['sessions_with_writes']} sessions"
                + (f"; {s['mean_pending_lines']:.2f} pending lines" if label == "mnemo" else "")
            )
    print(
        f"mean context tokens: Mnemo {mean([r.context_tokens for r in replayed]):.0f}, "
        f"truncation {mean([r.truncation_tokens for r in replayed]):.0f}; budget "
        f"{args.budget}; window {args.window}; {time.perf_counter() - began:.0f} s"
    )
    if args.misses:
        for d in detail:
            for kind, value, ok in d["mnemo"]["checks"]:
                if not ok:
                    print(f"  miss {d['name']} {kind}: {value}")
            if not d["mnemo"]["newest_write_kept"]:
                print(f"  newest write dropped {d['name']}")
    if args.out:
        args.out.write_text(json.dumps(detail, ensure_ascii=False, indent=1))
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

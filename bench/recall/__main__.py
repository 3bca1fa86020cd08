"""The command line of the recall benchmark: ``python -m bench.recall --out FILE.json``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench.recall
from bench._service import running_service
from bench.latency import machine
from bench.recall.driver import CHECKPOINT_EVERY, drive_all
from bench.recall.plot import plot
from bench.recall.report import print_report
from bench.recall.stats import TARGETS, analyse, headline, misses, overall, verdicts
from bench.recall.timing import standalone_timing
from bench.sessions import generate, plan_sessions

DEFAULTS = {"sessions": 8, "turns": 300, "min_turns": 60, "budget": 2500, "window": 8192}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.recall",
        description=bench.recall.__doc__,
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

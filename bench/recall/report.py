"""The recall benchmark's tables on stdout, and the ``SUMMARY`` line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.recall.stats import TARGETS, percentile
from bench.recall.timing import TIMING_RUNS, TIMING_TOKENS
from bench.sessions import RECALL_KINDS


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
            f"{c['compressions']:>5}{_f(percentile(c['duration_ms'], 50), '.1f'):>8}"
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
        + ", ".join(
            f"{k} {v['median_ms']} ms (CPU {v.get('median_cpu_ms', '–')} ms)"
            for k, v in t.items()
            if isinstance(v, dict)
        )
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

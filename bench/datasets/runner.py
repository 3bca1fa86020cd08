"""The flow ``bench.locomo`` and ``bench.longmemeval`` share.

start the service (or use ``--url``) → import (resumable) → wait for the jobs →
for each question: Mnemo's episodes (``GET /memories``) and a context
(``GET /context`` of a probe session) → the same questions against BM25 and
dense retrieval over the raw turns → per-category tables, targets, JSON, plots.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.core.tokens import count_tokens
from bench._service import Service, _stop_embedded_postgres
from bench.datasets import importer
from bench.datasets.baselines import BM25, DenseIndex
from bench.datasets.model import Dataset, Question, User
from bench.datasets.progress import Progress
from bench.datasets.scoring import (
    Hit,
    answer_present,
    by_category,
    chars_of,
    percentile,
    question_scores,
)
from bench.latency import machine

SYSTEMS = ("mnemo", "bm25", "dense")
CONTEXT_BUDGET = 2500
# What the service is run with (documented in docs/benchmarks-datasets.md):
# ten memories in a context, in at most a third of the 2,500-token budget, and
# no compression (the window is far above any session: this benchmark measures
# long-term retrieval; bench.recall measures compression).
SERVICE_ENV = {
    "MNEMO_MEMORY_TOP_K": "10",
    "MNEMO_MEMORY_BUDGET_TOKENS": str(CONTEXT_BUDGET // 3),
    "MNEMO_MODEL_WINDOW_TOKENS": "1000000",
}
MEMORY_BUDGET = CONTEXT_BUDGET // 3
BASELINE_DEPTH = 10


@dataclass(frozen=True)
class Spec:
    """What differs between the two benchmarks."""

    prog: str
    title: str
    default_data: Path
    load: Callable[[Path, argparse.Namespace], Dataset]
    # name -> categories, reported besides each category (e.g. LoCoMo "1,2,4")
    groups: Mapping[str, Sequence[str]]
    # (metric, group, op, value)
    targets: Sequence[tuple[str, str, str, float]]
    runtime_target_s: float | None = None


# --------------------------------------------------------------------------- CLI


def parse_args(spec: Spec, argv: Sequence[str] | None, extra: Callable[[Any], None]) -> Any:
    parser = argparse.ArgumentParser(prog=spec.prog, description=spec.title)
    parser.add_argument("--data", type=Path, default=spec.default_data, help="dataset JSON")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument("--k", default="1,5,10", help="cut-offs of recall@k (default 1,5,10)")
    parser.add_argument("--url", default=None, help="a running service instead of starting one")
    parser.add_argument(
        "--database-url", default=None, help="start the service on this (migrated) Postgres"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="embedded Postgres directory (default: next to --out; kept if the run fails,"
        " so a rerun resumes the import)",
    )
    parser.add_argument("--keep-data", action="store_true", help="keep --data-dir after success")
    parser.add_argument(
        "--state", type=Path, default=None, help="import progress file (default: next to --out)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="parallel HTTP clients")
    parser.add_argument("--plot", type=Path, default=None, help="PNG of recall by category")
    parser.add_argument(
        "--plot-tokens", type=Path, default=None, help="PNG of context tokens vs history length"
    )
    parser.add_argument("--no-baselines", action="store_true", help="Mnemo only")
    extra(parser)
    args = parser.parse_args(argv)
    try:
        args.ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    except ValueError:
        parser.error("--k takes integers separated by commas, e.g. 1,5,10")
    if not args.ks or args.ks[0] < 1:
        parser.error("--k values must be at least 1")
    if args.state is None:
        args.state = args.out.with_name(args.out.name + ".state.json")
    if args.data_dir is None:
        args.data_dir = args.out.with_name(args.out.name + ".mnemo")
    return args


def fingerprint(path: Path, args: Any, names: Sequence[str]) -> str:
    digest = hashlib.sha256(Path(path).read_bytes())
    for name in names:
        digest.update(f"{name}={getattr(args, name, None)}".encode())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def service_for(args: Any) -> Iterator[str]:
    """The base URL of the service to benchmark: ``--url``, or one started here."""
    if args.url:
        yield args.url.rstrip("/")
        return
    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    service = Service(
        data_dir=data_dir,
        database_url=args.database_url,
        extra_env=SERVICE_ENV,
        ready_timeout_s=180.0,
    )
    ok = False
    try:
        took = service.start()
        print(f"service ready in {took:.1f} s at {service.base_url}", file=sys.stderr)
        yield service.base_url
        ok = True
    finally:
        service.stop()
        if args.database_url is None:
            _stop_embedded_postgres(data_dir)
        if ok and not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
        elif not ok:
            print(f"kept {data_dir} (rerun to resume)", file=sys.stderr)


# --------------------------------------------------------------------------- Mnemo


def mnemo_hit(memory: Mapping[str, Any]) -> Hit:
    source = memory.get("source") or {}
    sid = source.get("session_id")
    return Hit(
        turn_ids=tuple(str(d) for d in source.get("dataset_ids") or []),
        session_ids=(str(sid),) if sid else (),
        text=str(memory.get("text") or ""),
    )


async def ask_mnemo(
    client: httpx.AsyncClient, questions: Sequence[Question], k: int, concurrency: int
) -> dict[str, dict[str, Any]]:
    """Per question: the top-k episodes, and the probe session's context for the question."""
    gate = asyncio.Semaphore(concurrency)
    progress = Progress(len(questions), "questions")
    out: dict[str, dict[str, Any]] = {}

    async def one(q: Question) -> None:
        async with gate:
            began = time.perf_counter()
            r = await client.get(
                f"/v1/users/{q.user_id}/memories",
                params={"query": q.question, "limit": k, "kind": "episode"},
            )
            r.raise_for_status()
            search_ms = (time.perf_counter() - began) * 1000
            began = time.perf_counter()
            c = await client.get(
                f"/v1/sessions/{importer.probe_session_id(q.user_id)}/context",
                params={"query": q.question, "max_tokens": CONTEXT_BUDGET},
            )
            c.raise_for_status()
            context_ms = (time.perf_counter() - began) * 1000
            body = c.json()
            out[q.question_id] = {
                "hits": [mnemo_hit(m) for m in r.json()["memories"]],
                "context": body["text"],
                "context_tokens": body["tokens"],
                "search_ms": search_ms,
                "context_ms": context_ms,
            }
            progress.advance()

    try:
        await asyncio.gather(*(one(q) for q in questions))
    finally:
        progress.close()
    return out


# --------------------------------------------------------------------------- baselines


@dataclass
class RawIndex:
    user: User
    hits: list[Hit]  # one per raw turn with text
    bm25: BM25
    dense: DenseIndex | None = None


def raw_index(user: User) -> RawIndex:
    hits = [Hit((t.dataset_id,), (s.session_id,), t.content) for s, t in user.turns() if t.content]
    return RawIndex(user, hits, BM25([h.text for h in hits]))


def embed_raw(indexes: Sequence[RawIndex]) -> float:
    """Embed every raw turn with the service's model; returns the seconds it took."""
    from app.memories.embed import USEEmbedder

    embedder = USEEmbedder()
    began = time.perf_counter()
    progress = Progress(sum(len(ix.hits) for ix in indexes), "raw turns embedded")
    for ix in indexes:
        vectors = []
        for start in range(0, len(ix.hits), 256):
            batch = [h.text for h in ix.hits[start : start + 256]]
            vectors.extend(embedder.embed_sync(batch))
            progress.advance(len(batch))
        ix.dense = DenseIndex(vectors)
    progress.close()
    return time.perf_counter() - began


def ask_baselines(
    indexes: Mapping[str, RawIndex], questions: Sequence[Question], k: int
) -> dict[str, dict[str, list[Hit]]]:
    from app.memories.embed import USEEmbedder

    vectors = USEEmbedder().embed_sync([q.question for q in questions])
    out: dict[str, dict[str, list[Hit]]] = {"bm25": {}, "dense": {}}
    for q, vector in zip(questions, vectors, strict=True):
        ix = indexes[q.user_id]
        out["bm25"][q.question_id] = [ix.hits[i] for i in ix.bm25.top(q.question, k)]
        if ix.dense is not None:
            out["dense"][q.question_id] = [ix.hits[i] for i in ix.dense.top(vector, k)]
    return out


def packed_context(hits: Sequence[Hit], budget: int) -> tuple[str, int]:
    """Raw turns in rank order that fit ``budget`` tokens (as Mnemo packs memories)."""
    lines: list[str] = []
    left = budget
    for hit in hits:
        line = f"- {hit.text}"
        cost = count_tokens(line)
        if cost <= left:
            lines.append(line)
            left -= cost
    return "\n".join(lines), budget - left


# --------------------------------------------------------------------------- scoring


def score(
    dataset: Dataset,
    mnemo: Mapping[str, Mapping[str, Any]],
    baselines: Mapping[str, Mapping[str, list[Hit]]],
    ks: Sequence[int],
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Per-system rows (one per scored question) and per-question records for the JSON."""
    top = max(ks)
    rows: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    records: list[dict[str, Any]] = []
    for q in dataset.questions:
        m = mnemo.get(q.question_id)
        if m is None:
            continue
        budget_chars = chars_of(m["hits"], top)
        record: dict[str, Any] = {
            "question_id": q.question_id,
            "user_id": q.user_id,
            "category": q.category,
            "scored": q.scored,
            "question": q.question,
            "answer": q.answer,
            "evidence_turns": sorted(q.evidence_turns),
            "evidence_sessions": sorted(q.evidence_sessions),
        }
        systems: dict[str, list[Hit]] = {"mnemo": m["hits"]}
        for name in ("bm25", "dense"):
            if q.question_id in baselines.get(name, {}):
                systems[name] = baselines[name][q.question_id]
        for name, hits in systems.items():
            figures: dict[str, Any] = dict(
                question_scores(q, hits, ks, equal_chars=None if name == "mnemo" else budget_chars)
            )
            if name == "mnemo":
                figures["turn_r@chars"] = figures[f"turn_r@{top}"]
                figures["session_r@chars"] = figures[f"session_r@{top}"]
                context, tokens = m["context"], m["context_tokens"]
            else:
                context, tokens = packed_context(hits[:top], MEMORY_BUDGET)
            present = answer_present(q.answer, context)
            figures["answer_in_context"] = None if present is None else float(present)
            figures["context_tokens"] = tokens
            figures["turns_per_result"] = (
                statistics.fmean(len(h.turn_ids) for h in hits[:top]) if hits else None
            )
            figures["chars@top"] = chars_of(hits, top)
            record[name] = {
                **{k: v for k, v in figures.items() if v is not None},
                "top": [
                    {"sessions": list(h.session_ids), "turns": list(h.turn_ids)} for h in hits[:top]
                ],
            }
            if q.scored:
                rows[name].append({"category": q.category, **figures})
        records.append(record)
    return rows, records


def metric_names(ks: Sequence[int]) -> list[str]:
    names = [f"session_r@{k}" for k in ks] + [f"turn_r@{k}" for k in ks]
    return [*names, "turn_r@chars", "session_r@chars", "answer_in_context", "turns_per_result"]


def summarise(
    rows: Mapping[str, list[dict[str, Any]]], ks: Sequence[int], spec: Spec
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for system, system_rows in rows.items():
        if not system_rows:
            continue
        out[system] = by_category(system_rows, metric_names(ks), groups=spec.groups)
    return out


def context_stats(mnemo: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    tokens = [float(m["context_tokens"]) for m in mnemo.values()]
    search = [float(m["search_ms"]) for m in mnemo.values()]
    ctx = [float(m["context_ms"]) for m in mnemo.values()]
    return {
        "context_tokens_median": statistics.median(tokens) if tokens else None,
        "context_tokens_p90": percentile(tokens, 90),
        "context_tokens_max": max(tokens, default=None),
        "search_ms_median": round(statistics.median(search), 1) if search else None,
        "context_ms_median": round(statistics.median(ctx), 1) if ctx else None,
    }


def verdicts(spec: Spec, summary: Mapping[str, Any], figures: Mapping[str, Any]) -> list[dict]:
    out = []
    for metric, group, op, value in spec.targets:
        if metric == "context_tokens_median":
            actual = figures.get("context_tokens_median")
        elif metric == "runtime_s":
            actual = figures.get("runtime_s")
        else:
            actual = summary.get("mnemo", {}).get(group, {}).get(metric)
        ok = actual is not None and (actual >= value if op == "≥" else actual <= value)
        out.append(
            {
                "metric": metric,
                "group": group,
                "op": op,
                "target": value,
                "actual": actual,
                "ok": ok,
            }
        )
    return out


def floor(summary: Mapping[str, Any], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Where Mnemo is not above both baselines (per category and metric)."""
    misses = []
    mnemo = summary.get("mnemo", {})
    for category, figures in mnemo.items():
        for metric in metrics:
            mine = figures.get(metric)
            others = {
                s: summary[s][category].get(metric)
                for s in ("bm25", "dense")
                if s in summary and category in summary[s]
            }
            best = max((v for v in others.values() if v is not None), default=None)
            if mine is not None and best is not None and mine <= best:
                misses.append({"category": category, "metric": metric, "mnemo": mine, **others})
    return misses


# --------------------------------------------------------------------------- report


def _f(value: Any) -> str:
    return "   -  " if value is None else f"{value:6.3f}"


def print_report(result: Mapping[str, Any], spec: Spec) -> None:
    summary = result["summary"]
    names = result["category_names"]
    ks = result["parameters"]["k"]
    top = max(ks)
    params = result["parameters"]
    print(
        f"\n{spec.title} — {params['data']}: {result['dataset']['users']} users, "
        f"{result['dataset']['sessions']} sessions, {result['dataset']['turns']} turns, "
        f"{result['dataset']['questions_scored']} scored questions"
    )
    present = [s for s in SYSTEMS if s in summary]
    cats = list(summary["mnemo"].keys())
    blocks = [
        (
            "session recall@5" if 5 in ks else f"session recall@{ks[0]}",
            "session_r@5" if 5 in ks else f"session_r@{ks[0]}",
        ),
        (f"turn recall@{top}", f"turn_r@{top}"),
        (f"turn recall, baselines at Mnemo's top-{top} characters", "turn_r@chars"),
        ("answer string in context", "answer_in_context"),
    ]
    for title, metric in blocks:
        print(f"\n{title}")
        head = f"{'category':<30}{'n':>5}" + "".join(f"{s:>9}" for s in present)
        print(head)
        print("-" * len(head))
        for cat in cats:
            n = summary["mnemo"][cat]["n"]
            label = f"{cat} {names.get(cat, '')}".strip() if cat in names else cat
            cells = "".join(f"{_f(summary[s][cat].get(metric)):>9}" for s in present)
            print(f"{label[:30]:<30}{n:>5}{cells}")
    print("\nall cut-offs (Mnemo / BM25 / dense)")
    for cat in cats:
        parts = []
        for kind in ("session", "turn"):
            for k in ks:
                metric = f"{kind}_r@{k}"
                vals = "/".join(f"{summary[s][cat].get(metric) or 0:.2f}" for s in present)
                parts.append(f"{kind[0]}R@{k} {vals}")
        print(f"  {cat:<22} " + "  ".join(parts))
    figures = result["figures"]
    print(
        f"\ncontext tokens (Mnemo, budget {CONTEXT_BUDGET}): median "
        f"{figures['context_tokens_median']}, p90 {figures['context_tokens_p90']}; "
        f"mean turns per Mnemo result {summary['mnemo']['all'].get('turns_per_result')}"
    )
    t = result["timings_s"]
    print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in t.items() if isinstance(v, float)))
    print("\ntargets")
    for v in result["targets"]:
        mark = "ok  " if v["ok"] else "MISS"
        actual = "-" if v["actual"] is None else f"{v['actual']:.3f}"
        print(
            f"  {mark} {v['metric']:<22} {v['group']:<8} {actual:>9}"
            f"   target {v['op']} {v['target']:g}"
        )
    misses = result["floor_misses"]
    print(f"\nfloor (Mnemo above both baselines, per category): {len(misses)} misses")
    for miss in misses:
        print(
            f"  {miss['category']:<22} {miss['metric']:<14} mnemo {_f(miss['mnemo'])} "
            f"bm25 {_f(miss.get('bm25'))} dense {_f(miss.get('dense'))}"
        )


# --------------------------------------------------------------------------- main


async def _run(args: Any, spec: Spec, dataset: Dataset, base_url: str) -> dict[str, Any]:
    timings: dict[str, float] = {}
    ks = args.ks
    scored = [q for q in dataset.questions if q.scored]
    state = importer.ImportState.open(
        args.state, fingerprint(args.data, args, ["limit", "limit_conversations"])
    )
    indexes = {u.user_id: raw_index(u) for u in dataset.users}
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=300.0, limits=limits) as client:
        imported = await importer.import_dataset(
            client, dataset, state, concurrency=args.concurrency
        )
        timings["import"] = imported["seconds"]
        # The raw turns are embedded for the dense baseline while the worker
        # indexes: the worker uses one core, this the other.
        embed_task = (
            None
            if args.no_baselines
            else asyncio.create_task(asyncio.to_thread(embed_raw, list(indexes.values())))
        )
        waited = await importer.wait_for_jobs(client)
        timings["index_jobs_wait"] = waited["seconds"]
        if embed_task is not None:
            timings["baseline_embed_turns"] = round(await embed_task, 2)
        began = time.perf_counter()
        mnemo = await ask_mnemo(client, scored, max(ks), args.concurrency)
        timings["mnemo_queries"] = round(time.perf_counter() - began, 2)
    baselines: dict[str, dict[str, list[Hit]]] = {}
    if not args.no_baselines:
        began = time.perf_counter()
        # Deeper than k: "recall at equal characters" reads as far as Mnemo's top-k holds.
        baselines = ask_baselines(indexes, scored, max(ks) * BASELINE_DEPTH)
        timings["baseline_queries"] = round(time.perf_counter() - began, 2)
    rows, records = score(dataset, mnemo, baselines, ks)
    summary = summarise(rows, ks, spec)
    history = {u.user_id: sum(count_tokens(t.content) for _, t in u.turns()) for u in dataset.users}
    return {
        "imported": imported,
        "jobs": waited,
        "timings_s": timings,
        "summary": summary,
        "context": context_stats(mnemo),
        "questions": records,
        "history_tokens": history,
    }


def main(spec: Spec, argv: Sequence[str] | None, extra: Callable[[Any], None]) -> int:
    args = parse_args(spec, argv, extra)
    began = time.perf_counter()
    dataset = spec.load(args.data, args)
    with service_for(args) as base_url:
        run = asyncio.run(_run(args, spec, dataset, base_url))
    runtime = time.perf_counter() - began
    run["timings_s"]["total"] = round(runtime, 2)
    figures = {**run["context"], "runtime_s": round(runtime, 1)}
    headline_metrics = ["session_r@5" if 5 in args.ks else f"session_r@{args.ks[0]}"]
    headline_metrics.append(f"turn_r@{max(args.ks)}")
    result: dict[str, Any] = {
        "benchmark": dataset.name,
        "parameters": {
            "data": str(args.data),
            "k": args.ks,
            "context_budget": CONTEXT_BUDGET,
            "baseline_context_budget": MEMORY_BUDGET,
            "service_env": SERVICE_ENV if not args.url else "(external service)",
            **{k: getattr(args, k) for k in ("limit", "limit_conversations") if hasattr(args, k)},
        },
        "machine": machine(),
        "dataset": {
            "users": len(dataset.users),
            "sessions": dataset.session_count,
            "turns": dataset.turn_count,
            "questions": len(dataset.questions),
            "questions_scored": sum(q.scored for q in dataset.questions),
        },
        "category_names": dataset.category_names,
        "summary": run["summary"],
        "figures": figures,
        "timings_s": run["timings_s"],
        "import": run["imported"],
        "jobs": run["jobs"],
        "targets": [],
        "floor_misses": floor(run["summary"], headline_metrics),
        "session_labels": dataset.session_labels,
        "history_tokens": run["history_tokens"],
        "questions": run["questions"],
    }
    result["targets"] = verdicts(spec, result["summary"], figures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print_report(result, spec)
    print(f"wrote {args.out}", file=sys.stderr)
    if args.plot or args.plot_tokens:
        from bench.datasets import plots

        if args.plot:
            plots.recall_by_category(result, args.plot, spec.title)
            print(f"wrote {args.plot}", file=sys.stderr)
        if args.plot_tokens:
            plots.tokens_vs_history(result, args.plot_tokens, spec.title)
            print(f"wrote {args.plot_tokens}", file=sys.stderr)
    return 0

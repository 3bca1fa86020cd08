"""The flow ``bench.locomo`` and ``bench.longmemeval`` share.

start the service (or use ``--url``) → import (resumable) → wait for the jobs →
for each question, one client: ``GET /context?query=…&max_tokens=B`` of a fresh
probe session at each budget B (the product), and ``GET /memories?kind=episode``
(the secondary episode-search figures) → the same questions against BM25 and
dense retrieval over the raw turns, packed to the same B tokens → per-category
tables, targets, JSON, plots.

Headline metric, **evidence present**: the share of a question's evidence turns
whose text is in the context (``scoring.ContextText``: ≥ 80 % of the turn's word
trigrams, the same test for every system). A baseline's context is its ranked
raw turns, one ``- text`` line each, in rank order while they fit B tokens
(cl100k, as the service counts): the baselines get the whole budget, Mnemo's
context pays for its message framing, headers, dates and task state out of it.

Latency of a query never seen before (the issue's p50 ≤ 10 ms): after the scored pass,
rounds ask every scored question again at the first budget, one client. Before each
round the API process is restarted, so its query-vector cache starts empty and every
read of the round embeds its query (Postgres keeps running, so the pages the scored pass
read are warm); each read's context must equal the scored pass's (the same retrieval,
checked). Two kinds of round:

* ``--rounds`` **cold** rounds: one read of an unrelated query, then the questions. The
  reads run on a process and Postgres backends that have just started (new connections:
  empty catalog caches, custom plans, the shared buffers not yet mapped; the embedder's
  kept token rows empty), which a running service pays once. On LongMemEval_S, one
  question per user, every measured read is its user's first.
* ``--warm-rounds`` **warm** rounds: the restarted process first serves each questioned
  user the generic ``WARM_UP_QUERIES`` (results dropped), as a running service has served
  that user's agent before; then the questions, each still new to the process (their
  rarer words too: the warm-up queries share only common words with them). This is the
  figure of a service in use, and the one the target is judged on; the cold one is
  printed beside it.

Reported per kind: p50 / p90 of those reads, each round's p50, the API's and Postgres's
CPU per read, and the load average; beside them the scored pass's first-budget reads
(``…_first_pass``: each user's first read since Postgres started, 15 reads on
LongMemEval_S). The run writes nothing to the database (the probe sessions are re-posted
as duplicates) and ANALYZEs only the tables changed since their last ANALYZE, so reruns
on a kept ``--data-dir`` read the same data with the same planner statistics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
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
from app.stores.embedded import stop_embedded
from bench._service import Service
from bench.datasets import importer
from bench.datasets.baselines import BM25, DenseIndex
from bench.datasets.model import Dataset, Question, User
from bench.datasets.progress import Progress
from bench.datasets.scoring import (
    ContextText,
    Hit,
    answer_present,
    by_category,
    chars_of,
    evidence_present,
    percentile,
    question_scores,
)
from bench.latency import machine

SYSTEMS = ("mnemo", "bm25", "dense")
BUDGETS = (500, 1000, 2500)
# No compression (the window is far above any session): this benchmark measures
# long-term retrieval; bench.recall measures compression. Everything else is the
# product's defaults.
SERVICE_ENV = {"MNEMO_MODEL_WINDOW_TOKENS": "1000000"}
# Ranked raw turns a baseline reads: enough to fill the largest budget.
BASELINE_DEPTH = 400
# What the baselines must beat by, and where (the targets).
MARGIN = 0.10
# Latency rounds after the scored pass: each asks every scored question once more.
ROUNDS = 5
# The query of the read that wakes a restarted API process in a cold round (nothing to
# do with any question: it is embedded once and never asked again).
WARM_UP_QUERY = "warm-up read of a restarted service"
# Warm rounds: what a service in use has served each user before the measured read.
# Generic, as an agent's context reads are; written for no dataset (their words are
# common ones, so a question's own words stay new to the process).
WARM_ROUNDS = 5
WARM_UP_QUERIES = (
    "What did we talk about last time?",
    "Remind me what I decided about the plan.",
    "When did I mention that?",
    "What do I usually prefer?",
    "Where did I say I was going?",
    "Who was the person I told you about?",
    "How much did it cost in the end?",
    "What should I keep in mind for next week?",
)


@dataclass(frozen=True)
class Spec:
    """What differs between the two benchmarks."""

    prog: str
    title: str
    default_data: Path
    load: Callable[[Path, argparse.Namespace], Dataset]
    # name -> categories, reported besides each category (e.g. LoCoMo "1-4")
    groups: Mapping[str, Sequence[str]]
    # the group the headline targets are checked on
    main_group: str
    # (metric, group, op, value) on Mnemo's figures
    targets: Sequence[tuple[str, str, str, float]]
    # what --split heldout keeps aside (documented per benchmark)
    heldout_note: str = ""


# --------------------------------------------------------------------------- CLI


def parse_args(spec: Spec, argv: Sequence[str] | None, extra: Callable[[Any], None]) -> Any:
    parser = argparse.ArgumentParser(prog=spec.prog, description=spec.title)
    parser.add_argument("--data", type=Path, default=spec.default_data, help="dataset JSON")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument(
        "--split",
        choices=("dev", "heldout", "all"),
        default="dev",
        help=f"dev (tuned on), heldout (kept aside: {spec.heldout_note}) or all",
    )
    parser.add_argument("--k", default="1,5,10", help="cut-offs of episode recall@k")
    parser.add_argument(
        "--budgets",
        default=",".join(map(str, BUDGETS)),
        help="context budgets in tokens (default 500,1000,2500)",
    )
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
    parser.add_argument("--plot", type=Path, default=None, help="PNG of recall against tokens")
    parser.add_argument(
        "--plot-episodes", type=Path, default=None, help="PNG of episode recall by category"
    )
    parser.add_argument(
        "--markdown", type=Path, default=None, help="write the tables as Markdown here"
    )
    parser.add_argument("--no-baselines", action="store_true", help="Mnemo only")
    parser.add_argument(
        "--rounds",
        type=int,
        default=ROUNDS,
        help=f"latency rounds of new-query reads after the scored pass (default {ROUNDS};"
        " 0: none; with --url the service is not restarted, so its query cache stays warm"
        " and the rounds are skipped)",
    )
    parser.add_argument(
        "--warm-rounds",
        type=int,
        default=WARM_ROUNDS,
        help=f"latency rounds of new-query reads on a restarted API that first served each"
        f" user generic queries (default {WARM_ROUNDS}; 0: none; module doc)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra service environment (repeatable), for experiments",
    )
    extra(parser)
    args = parser.parse_args(argv)
    try:
        args.ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
        args.budget_list = sorted({int(b) for b in args.budgets.split(",") if b.strip()})
    except ValueError:
        parser.error("--k and --budgets take integers separated by commas, e.g. 1,5,10")
    if not args.ks or args.ks[0] < 1:
        parser.error("--k values must be at least 1")
    if not args.budget_list or args.budget_list[0] < 64:
        parser.error("--budgets values must be at least 64")
    if args.rounds < 0 or args.warm_rounds < 0:
        parser.error("--rounds and --warm-rounds must be at least 0")
    args.extra_env = dict(e.split("=", 1) for e in args.env if "=" in e)
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
def service_for(args: Any) -> Iterator[tuple[str, Service | None]]:
    """The base URL of the service to benchmark and, when started here, the service:
    ``--url``, or one started here."""
    if args.url:
        yield args.url.rstrip("/"), None
        return
    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    service = Service(
        data_dir=data_dir,
        database_url=args.database_url,
        extra_env={**SERVICE_ENV, **args.extra_env},
        ready_timeout_s=180.0,
    )
    ok = False
    try:
        took = service.start()
        print(f"service ready in {took:.1f} s at {service.base_url}", file=sys.stderr)
        yield service.base_url, service
        ok = True
    finally:
        service.stop()
        if args.database_url is None:
            stop_embedded(data_dir)
        if ok and not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
        elif not ok:
            print(f"kept {data_dir} (rerun to resume)", file=sys.stderr)


# The tables whose planner statistics are missing or older than their rows.
STALE_STATISTICS = """
    SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables
    WHERE coalesce(last_analyze, last_autoanalyze) IS NULL OR n_mod_since_analyze > 0
    ORDER BY 1
"""


async def settle(conn: Any) -> list[str]:
    """``VACUUM`` the database and ``ANALYZE`` the tables changed since their last
    ANALYZE (returned), as autovacuum soon would after a bulk import: the latencies are
    those of a settled service, not of its first minute with tables that have no
    planner statistics yet, nor a visibility map for index-only scans (the BM25
    postings are read from their index alone). A table left unchanged keeps its
    statistics: ANALYZE samples a large table at random, so analysing it again on
    every run of a kept database would give each run other statistics, and perhaps
    other plans."""
    await conn.execute("VACUUM")
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    stale: list[str] = [row[0] for row in await conn.fetch(STALE_STATISTICS)]
    for table in stale:
        await conn.execute(f"ANALYZE {table}")
    return stale


async def analyze(args: Any) -> list[str]:
    """``settle`` the service's database; not with ``--url`` (not ours to touch)."""
    if args.url:
        return []
    import asyncpg

    if args.database_url:
        conn = await asyncpg.connect(args.database_url.replace("+asyncpg", ""))
    else:
        pgdata = (args.data_dir / "pg").resolve()
        conn = await asyncpg.connect(host=str(pgdata), user="postgres", database="mnemo")
    try:
        return await settle(conn)
    finally:
        await conn.close()


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
    client: httpx.AsyncClient, questions: Sequence[Question], k: int, budgets: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """Per question, one client: the context at each budget, and the top-k episodes.

    One client so that the context latencies are those of an unloaded service.
    """
    progress = Progress(len(questions), "questions")
    out: dict[str, dict[str, Any]] = {}
    try:
        for q in questions:
            # The service's fixed cost per request, measured beside each question: on a
            # shared machine the context latency means little without it.
            began = time.perf_counter()
            (await client.get("/healthz")).raise_for_status()
            healthz_ms = (time.perf_counter() - began) * 1000
            contexts: dict[str, Any] = {}
            for budget in budgets:
                elapsed, body = await read_context(client, q.user_id, q.question, budget)
                contexts[str(budget)] = {
                    "text": body["text"],
                    "tokens": body["tokens"],
                    "ms": elapsed,
                }
            began = time.perf_counter()
            r = await client.get(
                f"/v1/users/{q.user_id}/memories",
                params={"query": q.question, "limit": k, "kind": "episode"},
            )
            r.raise_for_status()
            out[q.question_id] = {
                "hits": [mnemo_hit(m) for m in r.json()["memories"]],
                "contexts": contexts,
                "search_ms": (time.perf_counter() - began) * 1000,
                "healthz_ms": healthz_ms,
            }
            progress.advance()
    finally:
        progress.close()
    return out


# Every task (thread or process) ever read under a pid, keyed by (tid, start time), with
# its CPU at the last reading: a task that ended since keeps counting what it had spent.
_TASKS_SEEN: dict[int, dict[tuple[int, int], int]] = {}


def cpu_seconds_under(pid: int) -> float:
    """CPU time of ``pid``, its threads and the processes under it so far, to the
    nanosecond (``/proc/PID/task/*/schedstat``; ``/proc/PID/stat`` counts 10 ms ticks,
    too coarse for the 15 reads of a round). Linux only; 0 for a process gone.

    A thread or process that ended between two readings counts what it had spent at
    the last reading that saw it (what it spent after that is missed): the figure
    never goes down, where a plain sum of the live tasks did when a thread ended."""
    seen = _TASKS_SEEN.setdefault(pid, {})
    pending = [pid]
    while pending:
        current = pending.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                started = int((task / "stat").read_text().rsplit(")", 1)[1].split()[19])
                seen[int(task.name), started] = int((task / "schedstat").read_text().split()[0])
                pending.extend(int(c) for c in (task / "children").read_text().split())
    return sum(seen.values()) / 1e9


def postgres_cpu_seconds(data_dir: Path) -> float | None:
    """CPU time of the embedded Postgres in ``data_dir`` (its postmaster and the
    processes under it) so far; None when it is not ours."""
    try:
        return cpu_seconds_under(int((data_dir / "pg" / "postmaster.pid").read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return None


async def read_context(
    client: httpx.AsyncClient, user_id: str, query: str, budget: int
) -> tuple[float, dict[str, Any]]:
    """Milliseconds and body of ``GET /context?query=…`` of the user's probe session."""
    began = time.perf_counter()
    c = await client.get(
        f"/v1/sessions/{importer.probe_session_id(user_id)}/context",
        params={"query": query, "max_tokens": budget},
    )
    elapsed = (time.perf_counter() - began) * 1000
    c.raise_for_status()
    body: dict[str, Any] = c.json()
    return elapsed, body


async def latency_rounds(
    service: Service,
    questions: Sequence[Question],
    expected: Mapping[str, str],
    *,
    budget: int,
    rounds: int,
    pg_dir: Path | None,
    warm: bool = False,
) -> list[dict[str, Any]]:
    """``rounds`` rounds of new-query reads (module doc), cold or ``warm``: per round,
    each read's ms, the API's and Postgres's CPU seconds over its reads, the load
    average, and the reads whose context differs from the scored pass's (``expected``:
    question id -> text)."""
    if warm:
        users = list(dict.fromkeys(q.user_id for q in questions))
        warm_up = [(u, query) for query in WARM_UP_QUERIES for u in users]
    else:
        warm_up = [(questions[0].user_id, WARM_UP_QUERY)]
    # The rounds measure the API alone: the worker owes nothing now, and one restarted
    # beside each round would run its start-up sweeps meanwhile.
    service.extra_env = {**service.extra_env, "MNEMO_EMBEDDED_WORKER": "false"}
    out: list[dict[str, Any]] = []
    for _ in range(rounds):
        await asyncio.to_thread(service.restart)
        async with httpx.AsyncClient(base_url=service.base_url, timeout=300.0) as client:
            for user_id, query in warm_up:
                await read_context(client, user_id, query, budget)
            load = os.getloadavg()[0]
            api = cpu_seconds_under(service.pid) if service.pid else None
            pg = postgres_cpu_seconds(pg_dir) if pg_dir else None
            ms: list[float] = []
            differ: list[str] = []
            for q in questions:
                elapsed, body = await read_context(client, q.user_id, q.question, budget)
                ms.append(round(elapsed, 3))
                if body["text"] != expected.get(q.question_id):
                    differ.append(q.question_id)
            api_after = cpu_seconds_under(service.pid) if service.pid else None
            pg_after = postgres_cpu_seconds(pg_dir) if pg_dir else None
            healthz = []
            for _ in questions:
                began = time.perf_counter()
                (await client.get("/healthz")).raise_for_status()
                healthz.append((time.perf_counter() - began) * 1000)
        out.append(
            {
                "ms": ms,
                "api_cpu_s": None
                if api is None or api_after is None
                else round(api_after - api, 5),
                "postgres_cpu_s": None
                if pg is None or pg_after is None
                else round(pg_after - pg, 5),
                "healthz_ms_p50": round(statistics.median(healthz), 3),
                "loadavg_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
                "differ": differ,
            }
        )
    return out


def rounds_stats(rounds: Sequence[Mapping[str, Any]], *, kind: str = "") -> dict[str, Any]:
    """The new-query figures over every read of the latency rounds; ``kind`` ("warm")
    names the figures of warm rounds (``…new_query_warm…``)."""
    ms = [m for r in rounds for m in r["ms"]]
    if not ms:
        return {}
    if kind:
        return {
            k.replace("new_query", f"new_query_{kind}"): v for k, v in rounds_stats(rounds).items()
        }
    reads = len(ms)

    def per_read(key: str) -> float | None:
        values = [r[key] for r in rounds]
        if any(v is None for v in values):
            return None
        return round(sum(float(v) for v in values) * 1000 / reads, 3)

    return {
        "context_ms_p50_new_query": round(statistics.median(ms), 2),
        "context_ms_p90_new_query": percentile(ms, 90),
        "new_query_reads": reads,
        "new_query_rounds_p50": [round(statistics.median(r["ms"]), 2) for r in rounds],
        "new_query_api_cpu_ms_per_read": per_read("api_cpu_s"),
        "new_query_postgres_cpu_ms_per_read": per_read("postgres_cpu_s"),
        "new_query_healthz_ms_p50": round(
            statistics.median(r["healthz_ms_p50"] for r in rounds), 3
        ),
        "new_query_loadavg_1m": [r["loadavg_1m"] for r in rounds],
        "new_query_reads_differing": sum(len(r["differ"]) for r in rounds),
    }


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
    from app.providers.embed import USEEmbedder

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
    from app.providers.embed import USEEmbedder

    vectors = USEEmbedder().embed_sync([q.question for q in questions])
    out: dict[str, dict[str, list[Hit]]] = {"bm25": {}, "dense": {}}
    for q, vector in zip(questions, vectors, strict=True):
        ix = indexes[q.user_id]
        out["bm25"][q.question_id] = [ix.hits[i] for i in ix.bm25.top(q.question, k)]
        if ix.dense is not None:
            out["dense"][q.question_id] = [ix.hits[i] for i in ix.dense.top(vector, k)]
    return out


def packed_context(hits: Sequence[Hit], budget: int) -> tuple[str, int]:
    """Raw turns in rank order, one ``- text`` line each, while they fit ``budget`` tokens."""
    lines: list[str] = []
    left = budget
    for hit in hits:
        line = f"- {hit.text}"
        cost = count_tokens(line + "\n")
        if cost <= left:
            lines.append(line)
            left -= cost
        if left < 8:
            break
    return "\n".join(lines), budget - left


# --------------------------------------------------------------------------- scoring


def ev(budget: int) -> str:
    return f"ev@{budget}"


def tok(budget: int) -> str:
    return f"tok@{budget}"


def score(
    dataset: Dataset,
    mnemo: Mapping[str, Mapping[str, Any]],
    baselines: Mapping[str, Mapping[str, list[Hit]]],
    ks: Sequence[int],
    budgets: Sequence[int],
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Per-system rows (one per scored question) and per-question records for the JSON."""
    top = max(ks)
    texts = {u.user_id: {t.dataset_id: t.content for _, t in u.turns()} for u in dataset.users}
    rows: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    records: list[dict[str, Any]] = []
    for q in dataset.questions:
        m = mnemo.get(q.question_id)
        if m is None:
            continue
        turn_texts = texts[q.user_id]
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
            figures: dict[str, Any] = {
                f"episodes_{key}": value
                for key, value in question_scores(
                    q, hits, ks, equal_chars=None if name == "mnemo" else budget_chars
                ).items()
            }
            if name == "mnemo":
                figures["episodes_turn_r@chars"] = figures[f"episodes_turn_r@{top}"]
                figures["episodes_session_r@chars"] = figures[f"episodes_session_r@{top}"]
            for budget in budgets:
                if name == "mnemo":
                    got = m["contexts"][str(budget)]
                    context, tokens = got["text"], got["tokens"]
                    figures[f"ms@{budget}"] = round(got["ms"], 2)
                else:
                    context, tokens = packed_context(hits, budget)
                figures[ev(budget)] = evidence_present(
                    q.evidence_turns, turn_texts, ContextText(context)
                )
                figures[tok(budget)] = tokens
                if budget == max(budgets):
                    present = answer_present(q.answer, context)
                    figures["answer_in_context"] = None if present is None else float(present)
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


def metric_names(ks: Sequence[int], budgets: Sequence[int]) -> list[str]:
    names = [ev(b) for b in budgets] + [tok(b) for b in budgets] + ["answer_in_context"]
    names += [f"episodes_session_r@{k}" for k in ks] + [f"episodes_turn_r@{k}" for k in ks]
    return [*names, "episodes_turn_r@chars", "episodes_session_r@chars"]


def summarise(
    rows: Mapping[str, list[dict[str, Any]]], ks: Sequence[int], budgets: Sequence[int], spec: Spec
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for system, system_rows in rows.items():
        if not system_rows:
            continue
        out[system] = by_category(system_rows, metric_names(ks, budgets), groups=spec.groups)
    return out


def context_stats(mnemo: Mapping[str, Mapping[str, Any]], budgets: Sequence[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for budget in budgets:
        ms = [float(m["contexts"][str(budget)]["ms"]) for m in mnemo.values()]
        tokens = [float(m["contexts"][str(budget)]["tokens"]) for m in mnemo.values()]
        out[f"context_ms_p50@{budget}"] = round(statistics.median(ms), 2) if ms else None
        out[f"context_ms_p99@{budget}"] = percentile(ms, 99)
        out[f"context_tokens_median@{budget}"] = statistics.median(tokens) if tokens else None
    search = [float(m["search_ms"]) for m in mnemo.values()]
    out["search_ms_p50"] = round(statistics.median(search), 2) if search else None
    all_ms = [float(c["ms"]) for m in mnemo.values() for c in m["contexts"].values()]
    out["context_ms_p50"] = round(statistics.median(all_ms), 2) if all_ms else None
    # The first budget asked of a question is the only one whose query vector is not in
    # the service's query cache yet: its latency is that of a query never seen before.
    first = [float(m["contexts"][str(budgets[0])]["ms"]) for m in mnemo.values()]
    out["context_ms_p50_new_query"] = round(statistics.median(first), 2) if first else None
    # (replaced by the latency rounds' figure when they run: 15 reads are too few)
    out["context_ms_p50_new_query_first_pass"] = out["context_ms_p50_new_query"]
    healthz = [float(m["healthz_ms"]) for m in mnemo.values() if "healthz_ms" in m]
    out["healthz_ms_p50"] = round(statistics.median(healthz), 2) if healthz else None
    return out


def verdicts(
    spec: Spec, summary: Mapping[str, Any], figures: Mapping[str, Any], budgets: Sequence[int]
) -> list[dict[str, Any]]:
    out = []

    def add(metric: str, group: str, op: str, target: float, actual: float | None) -> None:
        ok = actual is not None and (actual >= target if op == "≥" else actual <= target)
        out.append(
            {
                "metric": metric,
                "group": group,
                "op": op,
                "target": round(target, 4),
                "actual": actual,
                "ok": ok,
            }
        )

    mine = summary.get("mnemo", {})
    for budget in budgets:
        for group in dict.fromkeys([spec.main_group, "all"]):
            bm25 = summary.get("bm25", {}).get(group, {}).get(ev(budget))
            if bm25 is not None:
                add(
                    f"{ev(budget)} vs BM25+{MARGIN:g}",
                    group,
                    "≥",
                    bm25 + MARGIN,
                    mine.get(group, {}).get(ev(budget)),
                )
    for metric, group, op, value in spec.targets:
        actual = figures.get(metric) if metric in figures else mine.get(group, {}).get(metric)
        add(metric, group, op, value, actual)
    return out


# --------------------------------------------------------------------------- report


def _f(value: Any) -> str:
    return "   -  " if value is None else f"{value:6.3f}"


def _label(cat: str, names: Mapping[str, str]) -> str:
    name = names.get(cat, "")
    return f"{cat} {name}".strip() if name and name != cat else cat


def print_report(result: Mapping[str, Any], spec: Spec) -> None:
    summary = result["summary"]
    names = result["category_names"]
    ks = result["parameters"]["k"]
    budgets = result["parameters"]["budgets"]
    top = max(ks)
    params = result["parameters"]
    print(
        f"\n{spec.title} — {params['data']} (split {params['split']}): "
        f"{result['dataset']['users']} users, "
        f"{result['dataset']['sessions']} sessions, {result['dataset']['turns']} turns, "
        f"{result['dataset']['questions_scored']} scored questions"
    )
    present = [s for s in SYSTEMS if s in summary]
    cats = list(summary["mnemo"].keys())
    print("\nevidence present in the context (share of evidence turns), per budget")
    head = f"{'category':<28}{'n':>5}" + "".join(
        f"{f'{s[:5]}@{b}':>11}" for b in budgets for s in present
    )
    print(head)
    print("-" * len(head))
    for cat in cats:
        n = summary["mnemo"][cat]["n"]
        cells = "".join(f"{_f(summary[s][cat].get(ev(b))):>11}" for b in budgets for s in present)
        print(f"{_label(cat, names)[:28]:<28}{n:>5}{cells}")
    print("\ntokens used (mean over questions, all)")
    for s in present:
        cells = "  ".join(f"{b}: {summary[s]['all'].get(tok(b)) or 0:7.1f}" for b in budgets)
        print(f"  {s:<6} {cells}")
    print(f"\nanswer string in the context at {max(budgets)} tokens")
    for cat in cats:
        cells = "".join(f"{_f(summary[s][cat].get('answer_in_context')):>9}" for s in present)
        print(f"  {_label(cat, names)[:26]:<26}{cells}")
    print(
        f"\nsecondary: episode search (GET /memories?kind=episode), session R@5 / turn R@{top}"
        f" (Mnemo / BM25 / dense; baselines at Mnemo's top-{top} characters for turn R)"
    )
    for cat in cats:
        s5 = "/".join(f"{summary[s][cat].get('episodes_session_r@5') or 0:.2f}" for s in present)
        tr = "/".join(f"{summary[s][cat].get('episodes_turn_r@chars') or 0:.2f}" for s in present)
        print(f"  {_label(cat, names)[:26]:<26} sR@5 {s5}   tR@chars {tr}")
    figures = result["figures"]
    print(
        "\ncontext latency, one client: p50 "
        + ", ".join(f"{b}: {figures.get(f'context_ms_p50@{b}')} ms" for b in budgets)
        + f"; episode search p50 {figures.get('search_ms_p50')} ms"
        + f"\n  new query (first budget, query vector not cached; each user's first read"
        f" since Postgres started) p50 {figures.get('context_ms_p50_new_query_first_pass')} ms;"
        f" /healthz in the same run p50 {figures.get('healthz_ms_p50')} ms"
    )
    for kind, label in (
        ("new_query", "cold latency rounds (API restarted before each, new backends)"),
        ("new_query_warm", "warm latency rounds (restarted, then generic reads of each user)"),
    ):
        if not figures.get(f"{kind}_reads"):
            continue
        print(
            f"  {label}, Postgres pages warm, module doc:"
            f" {figures[f'{kind}_reads']} new-query reads at {budgets[0]} tokens:"
            f" p50 {figures[f'context_ms_p50_{kind}']} ms, p90"
            f" {figures[f'context_ms_p90_{kind}']} ms; per round p50"
            f" {figures[f'{kind}_rounds_p50']}; API CPU"
            f" {figures[f'{kind}_api_cpu_ms_per_read']} ms a read, Postgres CPU"
            f" {figures[f'{kind}_postgres_cpu_ms_per_read']} ms a read; /healthz p50"
            f" {figures[f'{kind}_healthz_ms_p50']} ms; load"
            f" {figures[f'{kind}_loadavg_1m']}; reads whose context differs from the"
            f" scored pass: {figures[f'{kind}_reads_differing']}"
        )
    t = result["timings_s"]
    print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in t.items() if isinstance(v, float)))
    print("\ntargets")
    for v in result["targets"]:
        mark = "ok  " if v["ok"] else "MISS"
        actual = "-" if v["actual"] is None else f"{v['actual']:.3f}"
        print(
            f"  {mark} {v['metric']:<24} {v['group']:<6} {actual:>9}"
            f"   target {v['op']} {v['target']:g}"
        )


def markdown(result: Mapping[str, Any]) -> str:
    """The headline tables as Markdown (docs/benchmarks.md takes them as they are)."""
    summary = result["summary"]
    names = result["category_names"]
    budgets = result["parameters"]["budgets"]
    present = [s for s in SYSTEMS if s in summary]
    cats = list(summary["mnemo"].keys())
    head = "| category | n | " + " | ".join(f"{b}: " + " / ".join(present) for b in budgets) + " |"
    lines = [head, "|---|---|" + "---|" * len(budgets)]
    for cat in cats:
        cells = []
        for b in budgets:
            values = [summary[s][cat].get(ev(b)) for s in present]
            best = max((v for v in values if v is not None), default=None)
            cells.append(
                " / ".join(
                    "-" if v is None else (f"**{v:.3f}**" if v == best else f"{v:.3f}")
                    for v in values
                )
            )
        n = summary["mnemo"][cat]["n"]
        lines.append(f"| {_label(cat, names)} | {n} | " + " | ".join(cells) + " |")
    tokens = " / ".join(
        f"{b}: " + ", ".join(f"{s} {summary[s]['all'].get(tok(b)) or 0:.0f}" for s in present)
        for b in budgets
    )
    figures = result["figures"]
    lines += [
        "",
        f"Tokens used (mean): {tokens}. Context latency p50, one client: "
        + ", ".join(f"{b}: {figures.get(f'context_ms_p50@{b}')} ms" for b in budgets)
        + f" (a query not seen before, on a service in use:"
        f" {figures.get('context_ms_p50_new_query_warm')} ms, p90"
        f" {figures.get('context_ms_p90_new_query_warm')} ms over"
        f" {figures.get('new_query_warm_reads')} reads; on a just-restarted process:"
        f" {figures.get('context_ms_p50_new_query')} ms,"
        f" p90 {figures.get('context_ms_p90_new_query')} ms over"
        f" {figures.get('new_query_reads') or len(result['questions'])} reads; the"
        f" user's first read {figures.get('context_ms_p50_new_query_first_pass')} ms;"
        f" /healthz in the same run: {figures.get('healthz_ms_p50')} ms).",
        "",
        "| category | episode search session R@5 "
        + " / ".join(present)
        + " | turn R@10 at equal characters "
        + " / ".join(present)
        + " |",
        "|---|---|---|",
    ]
    for cat in cats:
        s5 = " / ".join(f"{summary[s][cat].get('episodes_session_r@5') or 0:.3f}" for s in present)
        tr = " / ".join(f"{summary[s][cat].get('episodes_turn_r@chars') or 0:.3f}" for s in present)
        lines.append(f"| {_label(cat, names)} | {s5} | {tr} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main


async def _run(
    args: Any, spec: Spec, dataset: Dataset, base_url: str, service: Service | None
) -> dict[str, Any]:
    timings: dict[str, float] = {}
    ks = args.ks
    scored = [q for q in dataset.questions if q.scored]
    state = importer.ImportState.open(
        args.state, fingerprint(args.data, args, ["limit", "limit_conversations", "split"])
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
        analysed = await analyze(args)
        began = time.perf_counter()
        mnemo = await ask_mnemo(client, scored, max(ks), args.budget_list)
        timings["mnemo_queries"] = round(time.perf_counter() - began, 2)
    rounds: list[dict[str, Any]] = []
    warm_rounds: list[dict[str, Any]] = []
    if service is not None and (args.rounds or args.warm_rounds) and scored:
        began = time.perf_counter()
        first = str(args.budget_list[0])
        expected = {qid: m["contexts"][first]["text"] for qid, m in mnemo.items()}
        pg_dir = None if args.database_url else args.data_dir
        budget = args.budget_list[0]
        if args.rounds:
            rounds = await latency_rounds(
                service, scored, expected, budget=budget, rounds=args.rounds, pg_dir=pg_dir
            )
        if args.warm_rounds:
            warm_rounds = await latency_rounds(
                service,
                scored,
                expected,
                budget=budget,
                rounds=args.warm_rounds,
                pg_dir=pg_dir,
                warm=True,
            )
        timings["latency_rounds"] = round(time.perf_counter() - began, 2)
    baselines: dict[str, dict[str, list[Hit]]] = {}
    if not args.no_baselines:
        began = time.perf_counter()
        baselines = ask_baselines(indexes, scored, BASELINE_DEPTH)
        timings["baseline_queries"] = round(time.perf_counter() - began, 2)
    rows, records = score(dataset, mnemo, baselines, ks, args.budget_list)
    summary = summarise(rows, ks, args.budget_list, spec)
    history = {u.user_id: sum(count_tokens(t.content) for _, t in u.turns()) for u in dataset.users}
    return {
        "imported": imported,
        "jobs": waited,
        "timings_s": timings,
        "summary": summary,
        "context": {
            **context_stats(mnemo, args.budget_list),
            **rounds_stats(rounds),
            **rounds_stats(warm_rounds, kind="warm"),
        },
        "latency_rounds": rounds,
        "latency_rounds_warm": warm_rounds,
        "analysed": analysed,
        "questions": records,
        "history_tokens": history,
    }


def main(spec: Spec, argv: Sequence[str] | None, extra: Callable[[Any], None]) -> int:
    args = parse_args(spec, argv, extra)
    began = time.perf_counter()
    dataset = spec.load(args.data, args)
    with service_for(args) as (base_url, service):
        run = asyncio.run(_run(args, spec, dataset, base_url, service))
    runtime = time.perf_counter() - began
    run["timings_s"]["total"] = round(runtime, 2)
    figures = {**run["context"], "runtime_s": round(runtime, 1)}
    result: dict[str, Any] = {
        "benchmark": dataset.name,
        "parameters": {
            "data": str(args.data),
            "split": args.split,
            "k": args.ks,
            "budgets": args.budget_list,
            "baseline_depth": BASELINE_DEPTH,
            "service_env": {**SERVICE_ENV, **args.extra_env} if not args.url else "(external)",
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
        "analysed": run["analysed"],
        "latency_rounds": run["latency_rounds"],
        "latency_rounds_warm": run["latency_rounds_warm"],
        "targets": [],
        "session_labels": dataset.session_labels,
        "history_tokens": run["history_tokens"],
        "questions": run["questions"],
    }
    result["targets"] = verdicts(spec, result["summary"], figures, args.budget_list)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print_report(result, spec)
    print(f"wrote {args.out}", file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(markdown(result), encoding="utf-8")
        print(f"wrote {args.markdown}", file=sys.stderr)
    if args.plot or args.plot_episodes:
        from bench.datasets import plots

        if args.plot:
            plots.recall_vs_tokens(result, args.plot, spec.title, spec.main_group)
            print(f"wrote {args.plot}", file=sys.stderr)
        if args.plot_episodes:
            plots.recall_by_category(result, args.plot_episodes, spec.title)
            print(f"wrote {args.plot_episodes}", file=sys.stderr)
    return 0

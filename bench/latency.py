"""Latency and throughput of the hot paths, against the real service.

    python -m bench.latency --out lat.json [--sessions S --turns T --clients C
                                            --requests N --batch B] [--full]

Starts ``mnemo serve`` (embedded Postgres in a temporary directory unless
``--database-url``), then, with C concurrent clients:

1. loads S sessions × T turns in batches of B (the batched-ingest figure, msg/s);
2. posts N single messages to random sessions (latency p50/p95/p99, req/s);
3. reads N contexts of random sessions (latency p50/p95/p99, req/s), right after
   N ``GET /healthz`` (the HTTP floor of the same server, same clients, same run);
4. repeats 2 and 3 (and the floor) with one client and N/4 requests: the service
   time without queueing behind the other clients;
5. waits, with no requests, until the job worker has caught up (jobs left, seconds);
6. repeats 3 with the worker idle (``*_caught_up``: every turn indexed, memories
   promoted, so most reads carry a memory block), then its reads from one client;
7. restarts the service on the same data (warm start).

The job worker indexes, compresses and promotes what phase 1 loaded while the later
phases run: it competes with the requests for the CPU, and the memories it promotes
make later context reads costlier. So each phase also reports the jobs still queued
or running at its end and, for context reads, how many had a memory block; step 5
shows what the worker still owed. ``--in-process-worker`` runs the worker inside the
API process (``MNEMO_WORKER_PROCESS=false``) instead of its own child process.

``--workers N`` runs ``mnemo serve --workers N``; ``--client-cpus 0`` pins this
process (the load generator, not the server) to those CPUs once the server runs.

Caveat: the load generator runs on the same machine (one asyncio process, one
keep-alive connection per client); its CPU is reported beside the server's, and
on a 2-core machine it competes with the server and Postgres for the cores.
Everything is loopback, and every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench._results import write_result
from bench._service import REPO_ROOT, Service, cpu_by_role, running_service

# The targets the figures are judged against (1,000 sessions × 200 turns, 8 clients).
TARGETS = {
    "context_p50_ms": ("≤", 3.0),
    "context_p99_ms": ("≤", 15.0),
    "post_one_p50_ms": ("≤", 5.0),
    "ingest_msgs_per_s": ("≥", 2000.0),
    "cold_start_s": ("≤", 5.0),
    # Issue 13: /context against the HTTP floor (/healthz) of the same run.
    "context_over_healthz_p50": ("≤", 1.3),
    "context_over_healthz_p99": ("≤", 2.0),
    "context_1client_p50_ms": ("≤", 3.0),
}

DEFAULTS = {"sessions": 200, "turns": 100, "clients": 8, "requests": 2000, "batch": 100}
FULL = {"sessions": 1000, "turns": 200, "clients": 8, "requests": 10000, "batch": 100}

PHASE_TIMEOUT_S = 900.0
WARMUP_REQUESTS = 200


# ---------------------------------------------------------------- synthetic turns

WORDS = (
    "flight hotel booking refund invoice customer order shipment delay weather "
    "meeting schedule budget report deploy rollback database index query cache "
    "latency error retry timeout password account address payment card window "
    "seat aisle morning evening tomorrow friday confirm cancel change prefer"
).split()
CHINESE = ["请帮我订一张明天去上海的机票", "不要红眼航班", "预算改成三千元", "靠窗的座位"]
TOOLS = ("search_flights", "book_hotel", "get_weather", "query_orders", "send_email")


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    return " ".join(words).capitalize() + "."


def exchange(rng: random.Random, session: str, first_seq: int) -> list[dict[str, Any]]:
    """One agent step, 4 messages: user, assistant tool call, tool result, assistant."""
    n = first_seq
    call_id = f"call_{session}_{n}"
    tool = rng.choice(TOOLS)
    args = {
        "query": _sentence(rng, 2, 6),
        "limit": rng.randint(1, 20),
        "filters": {"max_price": rng.randint(100, 5000), "tags": rng.sample(WORDS, 3)},
    }
    result = {
        "status": "ok",
        "items": [
            {
                "id": f"r{rng.randint(1000, 9999)}",
                "title": _sentence(rng, 3, 8),
                "price": round(rng.uniform(50, 900), 2),
            }
            for _ in range(rng.randint(1, 6))
        ],
    }
    user = rng.choice(CHINESE) if rng.random() < 0.1 else _sentence(rng, 6, 40)
    return [
        {"role": "user", "content": user, "id": f"m-{n}", "emphasized": rng.random() < 0.02},
        {
            "role": "assistant",
            "content": None,
            "id": f"m-{n + 1}",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(args)},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "id": f"m-{n + 2}",
            "content": json.dumps(result),
        },
        {"role": "assistant", "content": _sentence(rng, 10, 60), "id": f"m-{n + 3}"},
    ]


def session_messages(rng: random.Random, session: str, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while len(messages) < turns:
        messages.extend(exchange(rng, session, len(messages) + 1))
    return messages[:turns]


# ---------------------------------------------------------------- measurement


@dataclass
class Phase:
    name: str
    requests: int
    errors: int
    seconds: float
    items: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    req_per_s: float
    items_per_s: float
    server_cpu_s: float | None
    client_cpu_s: float
    first_error: str | None
    # The slowest requests: (request index, seconds into the phase, ms), to tell a
    # start-up stall from a steady tail.
    slowest: list[tuple[int, float, float]]
    # Jobs queued or running when the phase ended: how far behind the worker is (what
    # it still has to index and promote competes with the requests for the CPU).
    jobs_waiting_after: int | None = None
    # Context reads whose context has a long-term memory block (the costliest part of
    # a read; it appears as the worker promotes episodes, so it moves with the worker).
    with_memories: int | None = None
    # server_cpu_s split: the API processes', and the job worker's (which runs beside
    # the requests while it owes jobs: its CPU is not theirs). The embedded Postgres is
    # in neither.
    api_cpu_s: float | None = None
    worker_cpu_s: float | None = None


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    if not ordered:
        return float("nan")
    rank = max(1, round(p / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


Request = Callable[[httpx.AsyncClient, int], Awaitable[tuple[httpx.Response, int]]]


MEMORY_BLOCK = b'"kind":"memories"'  # in a context response's blocks
CATCH_UP_TIMEOUT_S = 300.0


async def jobs_waiting(client: httpx.AsyncClient) -> int | None:
    """Queued and running jobs, from the queue gauges of ``/metrics`` (database-wide)."""
    try:
        text = (await client.get("/metrics")).text
    except httpx.HTTPError:
        return None
    waiting = 0
    for line in text.splitlines():
        if line.startswith("mnemo_job_queue_depth{") and 'status="dead"' not in line:
            waiting += int(float(line.rsplit(" ", 1)[1]))
    return waiting


async def catch_up(client: httpx.AsyncClient) -> dict[str, Any]:
    """After the phases, with no requests: the jobs left, and the seconds until none is
    queued or running (None past ``CATCH_UP_TIMEOUT_S``). What the requests did not pay
    for during the phases is still owed by the worker; this says how much."""
    began = time.perf_counter()
    first = waiting = await jobs_waiting(client)
    while waiting and time.perf_counter() - began < CATCH_UP_TIMEOUT_S:
        await asyncio.sleep(0.5)
        waiting = await jobs_waiting(client)
    seconds = round(time.perf_counter() - began, 1) if waiting == 0 else None
    return {"jobs": first, "drained_s": seconds}


async def run_phase(
    name: str,
    service: Service,
    clients: list[httpx.AsyncClient],
    total: int,
    request: Request,
    *,
    contexts: bool = False,
) -> Phase:
    """``total`` requests shared out to the clients, each running one at a time
    (``contexts``: they are context reads; count those with a memory block)."""
    latencies: list[float] = []
    timeline: list[tuple[int, float, float]] = []
    errors = 0
    first_error: str | None = None
    items = 0
    with_memories = 0
    next_index = 0

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal errors, first_error, items, with_memories, next_index
        while next_index < total:
            i = next_index
            next_index += 1
            began = time.perf_counter()
            try:
                response, n = await request(client, i)
            except httpx.HTTPError as exc:
                errors += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}"
                continue
            latencies.append(time.perf_counter() - began)
            timeline.append((i, began - phase_began, latencies[-1]))
            if response.is_success:
                items += n
                with_memories += contexts and MEMORY_BLOCK in response.content
            else:
                errors += 1
                first_error = first_error or f"{response.status_code}: {response.text[:300]}"

    cpu0, server0, roles0 = time.process_time(), service.cpu_seconds(), service.cpu_sample()
    began = phase_began = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(client_loop(c) for c in clients)), PHASE_TIMEOUT_S)
    seconds = time.perf_counter() - began
    server1, roles1 = service.cpu_seconds(), service.cpu_sample()

    def role_cpu(role: str) -> float | None:
        if roles0 is None or roles1 is None:
            return None
        return round(cpu_by_role(roles0, roles1)[role], 2)

    waiting = await jobs_waiting(clients[0])
    ordered = sorted(ms * 1000 for ms in latencies)
    return Phase(
        name=name,
        requests=total,
        errors=errors,
        seconds=round(seconds, 3),
        items=items,
        p50_ms=round(percentile(ordered, 50), 2),
        p95_ms=round(percentile(ordered, 95), 2),
        p99_ms=round(percentile(ordered, 99), 2),
        max_ms=round(ordered[-1], 2) if ordered else float("nan"),
        mean_ms=round(sum(ordered) / len(ordered), 2) if ordered else float("nan"),
        req_per_s=round(total / seconds, 1),
        items_per_s=round(items / seconds, 1),
        server_cpu_s=None if server0 is None or server1 is None else round(server1 - server0, 2),
        client_cpu_s=round(time.process_time() - cpu0, 2),
        first_error=first_error,
        slowest=[
            (i, round(at, 3), round(s * 1000, 1))
            for i, at, s in sorted(timeline, key=lambda t: -t[2])[:5]
        ],
        jobs_waiting_after=waiting,
        with_memories=with_memories if contexts else None,
        api_cpu_s=role_cpu("api"),
        worker_cpu_s=role_cpu("worker"),
    )


@dataclass
class Workload:
    """The requests of a run, from its seed: the load's batches, the single posts (the
    8-client phase's, its warm-up's, then the one-client phase's) and the sessions
    whose context is read (the 8-client phase's, then its warm-up's; the one-client
    phase reads the first ones again)."""

    sessions: list[str]
    users: dict[str, str]
    batches: list[tuple[str, list[dict[str, Any]]]]
    singles: list[tuple[str, dict[str, Any]]]
    reads: list[str]

    @classmethod
    def of(cls, args: argparse.Namespace) -> Workload:
        rng = random.Random(args.seed)
        sessions = [f"bench-s{i:05d}" for i in range(args.sessions)]
        users = {s: f"bench-u{i % max(1, args.sessions // 4):05d}" for i, s in enumerate(sessions)}
        # One request of the load phase: one batch of one session.
        batches: list[tuple[str, list[dict[str, Any]]]] = []
        for s in sessions:
            messages = session_messages(rng, s, args.turns)
            for start in range(0, len(messages), args.batch):
                batches.append((s, messages[start : start + args.batch]))
        # Interleave sessions so that concurrent clients rarely queue on one session's lock.
        batches.sort(key=lambda b: int(b[1][0]["id"].split("-")[1]))
        counters = dict.fromkeys(sessions, args.turns + 1)
        one_rng = random.Random(args.seed + 1)
        singles: list[tuple[str, dict[str, Any]]] = []
        for _ in range(args.requests + WARMUP_REQUESTS + max(1, args.requests // 4)):
            s = one_rng.choice(sessions)
            seq = counters[s]
            counters[s] += 1
            message = exchange(one_rng, s, seq)[0 if one_rng.random() < 0.5 else 3]
            message["id"] = f"m-{seq}"
            singles.append((s, message))
        ctx_rng = random.Random(args.seed + 2)
        reads = [ctx_rng.choice(sessions) for _ in range(args.requests + WARMUP_REQUESTS)]
        return cls(sessions, users, batches, singles, reads)

    async def post_batch(self, client: httpx.AsyncClient, i: int) -> tuple[httpx.Response, int]:
        session, messages = self.batches[i]
        body = {"user_id": self.users[session], "messages": messages}
        r = await client.post(f"/v1/sessions/{session}/turns", json=body)
        return r, len(messages)

    async def post_one(self, client: httpx.AsyncClient, i: int) -> tuple[httpx.Response, int]:
        session, message = self.singles[i]
        r = await client.post(
            f"/v1/sessions/{session}/turns",
            json={"user_id": self.users[session], "messages": [message]},
        )
        return r, 1

    async def get_context(self, client: httpx.AsyncClient, i: int) -> tuple[httpx.Response, int]:
        r = await client.get(f"/v1/sessions/{self.reads[i]}/context")
        return r, 1


async def get_healthz(client: httpx.AsyncClient, i: int) -> tuple[httpx.Response, int]:
    return await client.get("/healthz"), 1


async def first_phases(
    service: Service, clients: list[httpx.AsyncClient], work: Workload, requests: int
) -> dict[str, Phase]:
    """Phases 1 to 3: the load, the single posts, the floor and the context reads, with
    ``clients`` (each after a warm-up on the tail of its request list)."""
    phases: dict[str, Phase] = {}
    print(f"loading {len(work.batches)} batches ({len(work.sessions)} sessions)…", file=sys.stderr)
    phases["ingest_batched"] = await run_phase(
        "ingest_batched", service, clients, len(work.batches), work.post_batch
    )
    # Warm-ups use the tail of each request list; the measured run uses the head.
    tail = _offset(work.post_one, requests)
    await run_phase("warmup", service, clients, WARMUP_REQUESTS, tail)
    print(f"posting {requests} single messages…", file=sys.stderr)
    phases["post_one"] = await run_phase("post_one", service, clients, requests, work.post_one)
    await run_phase(
        "warmup", service, clients, WARMUP_REQUESTS, _offset(work.get_context, requests)
    )
    print(f"{requests} × /healthz, then {requests} contexts…", file=sys.stderr)
    phases["healthz"] = await run_phase("healthz", service, clients, requests, get_healthz)
    phases["context"] = await run_phase(
        "context", service, clients, requests, work.get_context, contexts=True
    )
    return phases


async def measure(service: Service, args: argparse.Namespace) -> dict[str, Any]:
    work = Workload.of(args)
    sessions, post_one, get_context = work.sessions, work.post_one, work.get_context

    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    timeout = httpx.Timeout(60.0)
    clients = [
        httpx.AsyncClient(base_url=service.base_url, limits=limits, timeout=timeout)
        for _ in range(args.clients)
    ]
    phases: dict[str, Phase] = {}
    try:
        phases |= await first_phases(service, clients, work, args.requests)
        # The same requests from one client: service time without queueing.
        serial = max(1, args.requests // 4)
        print(f"{serial} single posts and {serial} contexts from one client…", file=sys.stderr)
        phases["post_one_1client"] = await run_phase(
            "post_one_1client",
            service,
            clients[:1],
            serial,
            _offset(post_one, args.requests + WARMUP_REQUESTS),
        )
        phases["healthz_1client"] = await run_phase(
            "healthz_1client", service, clients[:1], serial, get_healthz
        )
        phases["context_1client"] = await run_phase(
            "context_1client", service, clients[:1], serial, get_context, contexts=True
        )
        sample = (await clients[0].get(f"/v1/sessions/{sessions[0]}/context")).json()
        session_info = (await clients[0].get(f"/v1/sessions/{sessions[0]}")).json()
        if args.no_worker:  # no worker runs the jobs: waiting would only time out
            backlog = {"jobs": await jobs_waiting(clients[0]), "drained_s": None}
        else:
            print("waiting for the worker's backlog…", file=sys.stderr)
            backlog = await catch_up(clients[0])
        # The same reads once the worker owes nothing: every turn indexed (and what it
        # stores with a turn, such as the units the context read adds, is there), more
        # memories promoted. A service whose worker keeps up reads like this.
        if backlog["drained_s"] is not None:
            print(f"{args.requests} × /healthz and contexts, the worker idle…", file=sys.stderr)
            phases["healthz_caught_up"] = await run_phase(
                "healthz_caught_up", service, clients, args.requests, get_healthz
            )
            phases["context_caught_up"] = await run_phase(
                "context_caught_up", service, clients, args.requests, get_context, contexts=True
            )
            # A user with memories, read without queueing: the steady state's service time.
            phases["context_1client_caught_up"] = await run_phase(
                "context_1client_caught_up",
                service,
                clients[:1],
                serial,
                get_context,
                contexts=True,
            )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    return {
        "phases": {k: asdict(v) for k, v in phases.items()},
        "backlog_after_phases": backlog,
        "sample_context": {k: sample.get(k) for k in ("tokens", "max_tokens", "blocks")}
        | {"messages": len(sample.get("messages", []))},
        "sample_session": session_info,
    }


def _offset(request: Request, by: int) -> Request:
    async def shifted(client: httpx.AsyncClient, i: int) -> tuple[httpx.Response, int]:
        return await request(client, i + by)

    return shifted


# ---------------------------------------------------------------- reporting


def _loadavg() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def machine() -> dict[str, Any]:
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            ).stdout.strip()
            or None
        )
    except OSError:
        commit = None
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_commit": commit,
        "loadavg_1m_at_end": _loadavg(),
    }


def headline(result: dict[str, Any]) -> dict[str, float]:
    p = result["phases"]
    return {
        "context_p50_ms": p["context"]["p50_ms"],
        "context_p99_ms": p["context"]["p99_ms"],
        "post_one_p50_ms": p["post_one"]["p50_ms"],
        "ingest_msgs_per_s": p["ingest_batched"]["items_per_s"],
        "cold_start_s": result["cold_start_s"],
        "context_over_healthz_p50": round(p["context"]["p50_ms"] / p["healthz"]["p50_ms"], 2),
        "context_over_healthz_p99": round(p["context"]["p99_ms"] / p["healthz"]["p99_ms"], 2),
        "context_1client_p50_ms": p["context_1client"]["p50_ms"],
    } | _caught_up(p)


def _caught_up(p: dict[str, Any]) -> dict[str, float]:
    """The ratios once the worker owes nothing (not judged: the targets are the above)."""
    if "context_caught_up" not in p:
        return {}
    context, healthz = p["context_caught_up"], p["healthz_caught_up"]
    return {
        "caught_up_context_over_healthz_p50": round(context["p50_ms"] / healthz["p50_ms"], 2),
        "caught_up_context_over_healthz_p99": round(context["p99_ms"] / healthz["p99_ms"], 2),
    } | (
        {"caught_up_context_1client_p50_ms": p["context_1client_caught_up"]["p50_ms"]}
        if "context_1client_caught_up" in p
        else {}
    )


def verdicts(figures: dict[str, float]) -> dict[str, bool]:
    out = {}
    for key, (op, target) in TARGETS.items():
        value = figures[key]
        out[key] = value <= target if op == "≤" else value >= target
    return out


def _blank(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_report(result: dict[str, Any]) -> None:
    params = result["parameters"]
    print(
        f"\nMnemo latency — {params['sessions']} sessions × {params['turns']} turns, "
        f"{params['clients']} clients, {params['requests']} requests/phase, "
        f"batch {params['batch']}; {result['machine']['cpu_count']} CPUs, "
        f"Python {result['machine']['python']}"
    )
    head = (
        f"{'phase':<26}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'req/s':>9}{'items/s':>10}"
        f"{'errors':>8}{'srv cpu':>9}{'api ms':>8}{'cli cpu':>9}{'jobs':>7}{'w/ mem':>8}"
    )
    print(head)
    print("-" * len(head))
    for name, ph in result["phases"].items():
        srv = "-" if ph["server_cpu_s"] is None else f"{ph['server_cpu_s']:.1f}s"
        api = ph.get("api_cpu_s")
        api_ms = "-" if api is None else f"{api / ph['requests'] * 1000:.2f}"
        print(
            f"{name:<26}{ph['p50_ms']:>9.2f}{ph['p95_ms']:>9.2f}{ph['p99_ms']:>9.2f}"
            f"{ph['req_per_s']:>9.1f}{ph['items_per_s']:>10.1f}{ph['errors']:>8}"
            f"{srv:>9}{api_ms:>8}{ph['client_cpu_s']:>8.1f}s{_blank(ph['jobs_waiting_after']):>7}"
            f"{_blank(ph['with_memories']):>8}"
        )
    print(
        "  srv cpu: the server's processes (API and job worker, not Postgres); api ms: the"
        " API processes' CPU per request;\n  jobs: queued or running at the phase's end (the"
        " worker's backlog); w/ mem: context reads with a long-term memory block"
    )
    print()
    figures, ok = result["figures"], result["meets_target"]
    for key, (op, target) in TARGETS.items():
        mark = "ok  " if ok[key] else "MISS"
        print(f"  {mark} {key:<18} {figures[key]:>10.2f}   target {op} {target:g}")
    for key in _caught_up(result["phases"]):
        print(f"  info {key:<33} {figures[key]:>10.2f}   (the worker idle)")
    backlog = result["backlog_after_phases"]
    drained = backlog["drained_s"]
    print(
        f"  worker backlog after the phases: {backlog['jobs']} jobs, "
        + (f"done {drained:.1f} s later" if drained is not None else "not done in time")
    )
    print(
        f"  warm restart (same data): {result['warm_start_s']:.2f} s; "
        f"server RSS after load: {result['server_rss_mib']} MiB"
    )
    if result["parameters"]["sessions"] * result["parameters"]["turns"] < 200_000:
        print("  note: targets are defined at 1,000 × 200 (use --full); this run is smaller.")
    print(
        "  caveat: client and server share the machine's cores (see 'cli cpu'); "
        f"1-min load average before the run: {result['machine']['loadavg_1m_before']}"
    )
    print(
        "SUMMARY "
        + " ".join(f"{k}={v:g}" for k, v in figures.items())
        + f" misses={sum(not v for v in ok.values())}"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument(
        "--full",
        action="store_true",
        help="the target's size: 1,000 sessions × 200 turns, 10,000 requests",
    )
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--turns", type=int)
    parser.add_argument("--clients", type=int)
    parser.add_argument("--requests", type=int, help="measured requests per phase")
    parser.add_argument("--batch", type=int, help="messages per request while loading")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--database-url",
        default=None,
        help="benchmark against this Postgres (must be migrated) instead of a fresh embedded one",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="API processes (`mnemo serve --workers N`)"
    )
    parser.add_argument(
        "--client-cpus",
        default=None,
        help="pin the load generator (this process, not the server) to these CPUs, e.g. 0",
    )
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="MNEMO_EMBEDDED_WORKER=false: measure the API alone",
    )
    parser.add_argument(
        "--in-process-worker",
        action="store_true",
        help="MNEMO_WORKER_PROCESS=false: the job worker inside the API process",
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the embedded data directory (caught up): `bench.side_by_side` reads it",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the served process (MNEMO_* of this shell are not passed on)",
    )
    args = parser.parse_args(argv)
    preset = FULL if args.full else DEFAULTS
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("sessions", "turns", "clients", "requests", "batch"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be at least 1")
    if args.batch > 500:
        parser.error("--batch is at most 500 (the API's default per-request limit)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Other work on the machine skews every figure: recorded, not prevented.
    load_before = _loadavg()
    extra_env = {"MNEMO_EMBEDDED_WORKER": "false"} if args.no_worker else {}
    if args.in_process_worker:
        extra_env["MNEMO_WORKER_PROCESS"] = "false"
    extra_env.update(dict(item.split("=", 1) for item in args.env))
    with running_service(
        database_url=args.database_url,
        extra_env=extra_env,
        workers=args.workers,
        keep_data=args.keep_data,
    ) as service:
        cold = service.start_s
        print(f"service ready in {cold:.2f} s at {service.base_url}", file=sys.stderr)
        if args.client_cpus is not None:
            # After the spawn: the server keeps every CPU, only the generator is pinned.
            os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
        result = asyncio.run(measure(service, args))
        rss = service.rss_mib()
        warm = service.restart()
    result = {
        "parameters": {
            k: getattr(args, k)
            for k in (
                "sessions",
                "turns",
                "clients",
                "requests",
                "batch",
                "seed",
                "full",
                "no_worker",
                "in_process_worker",
                "workers",
                "client_cpus",
            )
        }
        | {"embedded_db": args.database_url is None, "warmup_requests": WARMUP_REQUESTS},
        "machine": machine() | {"loadavg_1m_before": load_before},
        "cold_start_s": round(cold, 3),
        "warm_start_s": round(warm, 3),
        "server_rss_mib": None if rss is None else round(rss, 1),
        **result,
        "targets": {k: {"op": op, "value": v} for k, (op, v) in TARGETS.items()},
        "notes": [
            "cold_start_s: spawn to first 200 from /readyz with a fresh data dir "
            "(embedded Postgres initdb + migrations when no --database-url).",
            "warm_start_s: the same after a restart on the loaded data.",
            "One asyncio process drives all clients (one keep-alive connection each); "
            "client, server and Postgres share the machine's CPUs.",
            "ingest_batched is the load phase itself.",
        ],
    }
    result["figures"] = headline(result)
    result["meets_target"] = verdicts(result["figures"])
    print_report(result)
    write_result(args.out, result)
    errors = sum(p["errors"] for p in result["phases"].values())
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())

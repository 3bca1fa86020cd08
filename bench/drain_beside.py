"""What `mnemo serve`'s job worker, draining a backlog, costs the 8-client reads beside it,
by the worker's CPU priority, alternated within one run.

    python -m bench.drain_beside --out F [--sessions 200 --turns 100 --singles 2000
                                          --requests 1000 --rounds 3]

Starts ``mnemo serve`` (the worker in its child process, as shipped), loads
``bench.latency``'s sessions (same generator and seed) with the worker stopped
(SIGSTOP), so that a backlog of indexing, compression and promotion jobs waits. Then,
round after round, the same 8-client phases (``/healthz`` then ``GET /context`` of
random sessions, ``--requests`` each, one keep-alive connection a client) under each
condition, in a rotated order:

- ``stopped``: the worker SIGSTOPped: the reads alone (what no worker would give);
- ``nice``: every thread of the worker and its extraction process at niceness 10,
  normal policy (``MNEMO_WORKER_IDLE=false``);
- ``idle``: every thread at SCHED_IDLE (the default): it runs on CPU nobody else wants.

The policy is switched from here (root can raise a thread back from SCHED_IDLE). Per
phase: p50 / p99, context ÷ healthz, the API's and the worker's CPU seconds, and the
jobs the worker finished (its progress on the backlog). Alternating within one run
keeps the box's other load (recorded) alike for the three conditions; the backlog
shrinks as the run goes, so the worker has work in every phase (checked: jobs waiting
at the end are printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg

from app.core.priority import threads
from bench._clients import closed, get, keepalive_clients, median, p50_p99_ms
from bench._clients import parser as bench_parser
from bench._service import Service, running_service
from bench.drain import WAITING, load
from bench.hotpaths_adds import _cpu, _tree

CONDITIONS = ("stopped", "nice", "idle")
DONE = "SELECT count(*) FROM jobs WHERE status = 'done'"


def worker_tree(service: Service) -> list[int]:
    """The job worker and its children (its extraction process)."""
    assert service.pid is not None
    for pid in _tree(service.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in argv:
            return _tree(pid)
    raise RuntimeError("no job worker under mnemo serve")


def set_condition(pids: list[int], condition: str) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP if condition == "stopped" else signal.SIGCONT)
        if condition == "stopped":
            continue
        policy = os.SCHED_IDLE if condition == "idle" else os.SCHED_OTHER
        for tid in threads(pid):
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, tid, 10)
            except OSError:  # a thread that ended meanwhile
                continue


async def count(dsn: str, sql: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def rounds(
    service: Service, args: argparse.Namespace, pids: list[int]
) -> list[dict[str, Any]]:
    dsn = f"postgresql://postgres@/mnemo?host={service.data_dir / 'pg'}"
    rng = random.Random(args.seed + 2)
    sessions = [f"bench-s{i}" for i in range(args.sessions)]
    context = get(lambda: f"/v1/sessions/{rng.choice(sessions)}/context")
    clients = keepalive_clients(service.base_url)
    out = []
    try:
        await closed(clients, context, 200)
        for r in range(args.rounds):
            order = CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]
            for condition in order:
                set_condition(pids, condition)
                done_before = await count(dsn, DONE)
                api = [p for p in _tree(service.pid or 0) if p not in pids]
                worker_before = sum(_cpu(p) for p in pids)
                load_1m = os.getloadavg()[0]
                health, _ = await closed(clients, get("/healthz"), args.requests)
                api_before = sum(_cpu(p) for p in api)
                reads, wall = await closed(clients, context, args.requests)
                api_cpu = sum(_cpu(p) for p in api) - api_before
                health_p50, health_p99 = p50_p99_ms(health)
                context_p50, context_p99 = p50_p99_ms(reads)
                out.append(
                    {
                        "round": r + 1,
                        "condition": condition,
                        "load_1m": round(load_1m, 2),
                        "healthz_p50_ms": health_p50,
                        "healthz_p99_ms": health_p99,
                        "context_p50_ms": context_p50,
                        "context_p99_ms": context_p99,
                        "context_req_s": round(len(reads) / wall, 1),
                        "api_cpu_ms_per_read": round(1000 * api_cpu / len(reads), 3),
                        "worker_cpu_s": round(sum(_cpu(p) for p in pids) - worker_before, 2),
                        "jobs_done": await count(dsn, DONE) - done_before,
                        "jobs_waiting": await count(dsn, WAITING),
                    }
                )
                print(json.dumps(out[-1]), file=sys.stderr)
    finally:
        set_condition(pids, "idle")
        await asyncio.gather(*(c.aclose() for c in clients))
    return out


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    table = {}
    for condition in CONDITIONS:
        mine = [r for r in runs if r["condition"] == condition]
        table[condition] = {
            "context_p50_ms": median([r["context_p50_ms"] for r in mine]),
            "context_p99_ms": median([r["context_p99_ms"] for r in mine]),
            "p50_over_healthz": median([r["context_p50_ms"] / r["healthz_p50_ms"] for r in mine]),
            "p99_over_healthz": median([r["context_p99_ms"] / r["healthz_p99_ms"] for r in mine]),
            "api_cpu_ms_per_read": median([r["api_cpu_ms_per_read"] for r in mine]),
            "worker_cpu_s": sum(r["worker_cpu_s"] for r in mine),
            "jobs_done": sum(r["jobs_done"] for r in mine),
        }
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("python -m bench.drain_beside", __doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--singles", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    # The lag guard off: it would replace the SIGSTOPped worker (the backlog waits) with
    # a niced one, and the conditions would no longer be what they say.
    with running_service(extra_env={"MNEMO_WORKER_LAG_LIMIT_S": "0"}) as service:
        pids = worker_tree(service)
        time.sleep(3)  # the worker's start (model loaded) before it is stopped
        set_condition(pids, "stopped")
        print("loading…", file=sys.stderr)
        load(service, args, prefix="bench", sessions=args.sessions)
        runs = asyncio.run(rounds(service, args, pids))
    table = summary(runs)
    args.out.write_text(
        json.dumps(
            {"parameters": vars(args) | {"out": str(args.out)}, "runs": runs, "summary": table},
            indent=2,
        )
        + "\n"
    )
    print(
        f"{'condition':10}{'p50':>8}{'p99':>8}{'÷hz p50':>9}{'÷hz p99':>9}{'api ms':>8}"
        f"{'wkr cpu':>9}{'jobs':>6}"
    )
    for condition, s in table.items():
        print(
            f"{condition:10}{s['context_p50_ms']:>8.2f}{s['context_p99_ms']:>8.2f}"
            f"{s['p50_over_healthz']:>9.2f}{s['p99_over_healthz']:>9.2f}"
            f"{s['api_cpu_ms_per_read']:>8.2f}{s['worker_cpu_s']:>9.2f}{s['jobs_done']:>6}"
        )
    print(f"jobs waiting at the end: {runs[-1]['jobs_waiting']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

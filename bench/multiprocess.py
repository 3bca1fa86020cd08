"""`mnemo serve --workers 2` against one API process: what this box can and cannot show.

    python -m bench.multiprocess --out F [--sessions 60 --turns 40 --requests 3000
                                          --rate 250 --client-cpus 0 --rounds 2]

For N = 1 and 2 API processes, alternating (1, 2, 2, 1, … : ``--rounds`` pairs), each
on a fresh ``mnemo serve --workers N`` with the job worker off (nothing but the
requests runs; the database is the embedded one, in a temporary folder), the same
sessions loaded with ``bench.latency``'s generator, then ``GET /context`` of random
sessions from 8 keep-alive clients in one asyncio process, pinned to ``--client-cpus``
once the server has started:

- ``closed``: each client sends its next read when the last is answered (the most
  the box serves): req/s, p50 / p99;
- ``open``: reads sent at a fixed ``--rate`` per second whatever the answers (the same
  offered load for N = 1 and 2; pick it below the closed figure of N = 1).

For each phase it charges the CPU seconds spent during the phase to the API processes,
the Postgres processes and the load generator, per 1,000 reads, and the share of the
box they used (CPU seconds ÷ wall seconds × cores). Where one process already leaves
no CPU idle, a second cannot add throughput; the API's CPU per read at equal offered
load says whether two processes cost more per read than one (contention), which is
what a box with spare cores would turn into throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx

from bench._clients import Send, closed, keepalive_clients, p50_p99_ms
from bench._clients import parser as bench_parser
from bench._service import Service, running_service
from bench.hotpaths_adds import _children, _cpu, _tree
from bench.latency import _loadavg, session_messages

WARMUP = 200


def cpu_now(service: Service) -> dict[str, float]:
    """CPU seconds so far: the API processes (serve's tree), the Postgres processes, and
    this process (the load generator)."""
    assert service.pid is not None
    pidfile = service.data_dir / "pg" / "postmaster.pid"
    postmaster = int(pidfile.read_text().split()[0])
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "api": sum(_cpu(p) for p in _tree(service.pid)),
        "postgres": _cpu(postmaster) + sum(_cpu(p) for p in _children(postmaster)),
        "generator": own.ru_utime + own.ru_stime,
    }


def load(service: Service, args: argparse.Namespace) -> list[str]:
    rng = random.Random(args.seed)
    names = [f"mp-s{i}" for i in range(args.sessions)]
    with httpx.Client(base_url=service.base_url, timeout=60) as client:
        for i, s in enumerate(names):
            messages = session_messages(rng, s, args.turns)
            for at in range(0, len(messages), 100):
                body = {"user_id": f"mp-u{i % 16}", "messages": messages[at : at + 100]}
                client.post(f"/v1/sessions/{s}/turns", json=body).raise_for_status()
    return names


async def open_loop(
    clients: list[httpx.AsyncClient], send: Send, total: int, rate: float
) -> list[float]:
    """``total`` reads started at ``rate`` per second, each on a free client (a read
    waits for one when all 8 are busy: that wait counts in its latency)."""
    free: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
    for c in clients:
        free.put_nowait(c)
    latencies: list[float] = []
    began = time.perf_counter()

    async def one(due: float) -> None:
        client = await free.get()
        try:
            await send(client)
            latencies.append(time.perf_counter() - due)  # from when it was due
        finally:
            free.put_nowait(client)

    tasks = []
    for i in range(total):
        due = began + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    return latencies


async def phases(service: Service, args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    rng = random.Random(args.seed + 1)
    clients = keepalive_clients(service.base_url)
    errors = 0

    async def send(client: httpx.AsyncClient) -> float:
        nonlocal errors
        began = time.perf_counter()
        r = await client.get(f"/v1/sessions/{rng.choice(names)}/context")
        errors += r.status_code != 200
        return time.perf_counter() - began

    out: dict[str, Any] = {}
    try:
        await closed(clients, send, WARMUP)
        for name in ("closed", "open"):
            before, began = cpu_now(service), time.perf_counter()
            if name == "closed":
                latencies, _ = await closed(clients, send, args.requests)
            else:
                latencies = sorted(await open_loop(clients, send, args.requests, args.rate))
            wall = time.perf_counter() - began
            after = cpu_now(service)
            used = {k: after[k] - before[k] for k in after}
            p50, p99 = p50_p99_ms(latencies)
            out[name] = {
                "req_s": round(len(latencies) / wall, 1),
                "p50_ms": p50,
                "p99_ms": p99,
                "wall_s": round(wall, 2),
                "cpu_ms_per_read": {
                    k: round(1000 * v / len(latencies), 3) for k, v in used.items()
                },
                "box_share": round(sum(used.values()) / (wall * (os.cpu_count() or 1)), 3),
                "errors": errors,
            }
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    return out


def one_run(args: argparse.Namespace, workers: int) -> dict[str, Any]:
    load_before = _loadavg()
    with running_service(extra_env={"MNEMO_EMBEDDED_WORKER": "false"}, workers=workers) as service:
        names = load(service, args)
        affinity = os.sched_getaffinity(0)
        if args.client_cpus is not None:
            os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
        try:
            result = asyncio.run(phases(service, args, names))
        finally:
            os.sched_setaffinity(0, affinity)  # the next server keeps every CPU
    return {"workers": workers, "loadavg_1m_before": load_before} | result


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser("python -m bench.multiprocess", __doc__)
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=250.0, help="open phase, reads/s")
    parser.add_argument("--client-cpus", default="0", help="pin the load generator ('' : no)")
    parser.add_argument("--rounds", type=int, default=2, help="pairs 1,2 then 2,1, …")
    args = parser.parse_args(argv)
    args.client_cpus = args.client_cpus or None
    runs = []
    for r in range(args.rounds):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            print(f"round {r + 1}: --workers {workers}…", file=sys.stderr)
            runs.append(one_run(args, workers))
    report = {"parameters": vars(args) | {"out": str(args.out)}, "runs": runs}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{'N':>2} {'phase':7}{'req/s':>8}{'p50':>8}{'p99':>8}  CPU ms/read api  pg  gen  box  load"
    )
    for run in runs:
        for phase in ("closed", "open"):
            p = run[phase]
            c = p["cpu_ms_per_read"]
            print(
                f"{run['workers']:>2} {phase:7}{p['req_s']:>8}{p['p50_ms']:>8}{p['p99_ms']:>8}"
                f"  {c['api']:>6} {c['postgres']:>5} {c['generator']:>5}"
                f" {p['box_share']:>5} {run['loadavg_1m_before']}"
            )
    with contextlib.suppress(ZeroDivisionError):
        for phase in ("closed", "open"):
            mean = {
                n: sum(r[phase]["req_s"] for r in runs if r["workers"] == n)
                / sum(r["workers"] == n for r in runs)
                for n in (1, 2)
            }
            print(f"{phase}: req/s with 2 processes ÷ 1: {mean[2] / mean[1]:.2f}")
        # What the box could carry at these CPU costs if every core were ours and busy:
        # cores ÷ the CPU a read costs everything on the box (API, Postgres, generator).
        cores = os.cpu_count() or 1
        for n in (1, 2):
            costs = [
                sum(r["closed"]["cpu_ms_per_read"].values()) for r in runs if r["workers"] == n
            ]
            per_read = sum(costs) / len(costs)
            print(
                f"--workers {n}: {per_read:.2f} ms of CPU a read on the box:"
                f" at most {1000 * cores / per_read:.0f} reads/s on {cores} cores"
            )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

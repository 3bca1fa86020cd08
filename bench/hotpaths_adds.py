"""Where the CPU of a memory add goes, the background embedding included.

    python -m bench.hotpaths_adds [--adds 2000] [--users 50] [--out FILE.json]

Starts ``mnemo serve`` (embedded Postgres, its job worker in a child process, the
default embedder unless ``--embedder``), then adds memories from one sequential
client the way ``../shared/peers/compare_mem0.py`` does (``--users`` users in turn,
one keep-alive connection), and reports, per add:

- the latency (p50/p95/p99) and the 1-minute load average when the adds started;
- CPU by process, from ``/proc``: the API process, the job worker (with its
  children), and the Postgres backends split by ``application_name`` (``mnemo``: the
  API's, ``mnemo-worker*``: the worker's; other Postgres processes apart) — during the
  adds, and during the drain that follows (until no job waits);
- how many embedding jobs ran and in how many commits (a batch is one commit).

The texts are generated from a fixed word list (seeded): no corpus text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench._service import Service, running_service

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november"
    " oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu red green"
    " blue amber violet coffee tea river mountain train plane garden piano chess running"
).split()
TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _tree(pid: int) -> list[int]:
    out, pending = [], [pid]
    while pending:
        p = pending.pop()
        out.append(p)
        pending += _children(p)
    return out


class Meter:
    """CPU seconds so far of the API process, its worker tree, and each Postgres process."""

    def __init__(self, service: Service) -> None:
        assert service.pid is not None
        self.api = service.pid
        pidfile = service.data_dir / "pg" / "postmaster.pid"
        self.postmaster = int(pidfile.read_text().split()[0])
        self.dsn = f"postgresql://postgres@/mnemo?host={service.data_dir / 'pg'}"
        self.names: dict[int, str] = {}

    def sample(self) -> dict[str, Any]:
        worker = [p for child in _children(self.api) for p in _tree(child)]
        pg = {p: _cpu(p) for p in _children(self.postmaster)}
        return {"api": _cpu(self.api), "worker": sum(_cpu(p) for p in worker), "pg": pg}

    async def learn_backends(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            rows = await conn.fetch(
                "SELECT pid, application_name FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
        finally:
            await conn.close()
        self.names.update({r["pid"]: r["application_name"] or "other" for r in rows})

    def per_add(self, before: dict[str, Any], after: dict[str, Any], n: int) -> dict[str, float]:
        out = {
            "api": after["api"] - before["api"],
            "worker": after["worker"] - before["worker"],
        }
        for pid, cpu in after["pg"].items():
            name = self.names.get(pid, "other")
            group = "postgres " + ("worker" if name.startswith("mnemo-worker") else name)
            out[group] = out.get(group, 0.0) + cpu - before["pg"].get(pid, 0.0)
        out["total"] = sum(out.values())
        return {k: round(1000 * v / n, 3) for k, v in sorted(out.items())}

    async def query(self, sql: str) -> Any:
        conn = await asyncpg.connect(self.dsn)
        try:
            return await conn.fetchrow(sql)
        finally:
            await conn.close()


WAITING = "SELECT count(*) AS n FROM jobs WHERE status IN ('queued', 'running')"
EMBED_RUNS = """
    SELECT count(*) AS jobs, count(DISTINCT finished_at) AS commits FROM jobs
    WHERE kind = 'embed_memories' AND status = 'done'
"""


def drain(meter: Meter, timeout_s: float = 300.0) -> float:
    began = time.perf_counter()
    while asyncio.run(meter.query(WAITING))["n"] and time.perf_counter() - began < timeout_s:
        time.sleep(0.05)
    return time.perf_counter() - began


def percentile(ordered: list[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def measure(service: Service, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    meter = Meter(service)
    with httpx.Client(base_url=service.base_url, timeout=60) as client:
        for i in range(100):  # warm-up: connections, caches, the model in both processes
            text = f"warm-up {i} " + " ".join(rng.sample(WORDS, 6))
            client.post(f"/v1/users/warm{i % 10}/memories", json={"text": text})
        drain(meter)
        warm = asyncio.run(meter.query(EMBED_RUNS))
        load = os.getloadavg()[0]
        before = meter.sample()
        latencies = []
        began = time.perf_counter()
        for i in range(args.adds):
            user = f"u{i % args.users}"
            text = f"{user} likes " + " ".join(rng.sample(WORDS, 8)) + f" number {i}"
            t0 = time.perf_counter()
            r = client.post(f"/v1/users/{user}/memories", json={"text": text})
            r.raise_for_status()
            r.json()
            latencies.append(time.perf_counter() - t0)
        wall = time.perf_counter() - began
        asyncio.run(meter.learn_backends())
        during = meter.sample()
        left = asyncio.run(meter.query(WAITING))["n"]
        drained_s = drain(meter)
        after = meter.sample()
        runs = asyncio.run(meter.query(EMBED_RUNS))
    latencies.sort()
    return {
        "adds": args.adds,
        "users": args.users,
        "load_1m_at_start": round(load, 2),
        "p50_ms": round(1000 * percentile(latencies, 0.50), 2),
        "p95_ms": round(1000 * percentile(latencies, 0.95), 2),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 2),
        "adds_per_s": round(args.adds / wall, 1),
        "cpu_ms_per_add_during": meter.per_add(before, during, args.adds),
        "cpu_ms_per_add_with_drain": meter.per_add(before, after, args.adds),
        "jobs_left_after_adds": left,
        "drained_s": round(drained_s, 2),
        "embed_jobs": runs["jobs"] - warm["jobs"],
        "embed_commits": runs["commits"] - warm["commits"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adds", type=int, default=2000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--embedder", default=None, help="MNEMO_EMBEDDER (default: use)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    env = {"MNEMO_EMBEDDER": args.embedder} if args.embedder else {}
    with running_service(extra_env=env) as service:
        result = measure(service, args)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

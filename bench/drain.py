"""The job worker's backlog after a load: how long it takes to drain, and its CPU per job.

    python -m bench.drain [--sessions 200 --turns 100 --batch 100 --singles 1000] [--out F]

Starts ``mnemo serve`` with its worker off (``MNEMO_EMBEDDED_WORKER=false``, embedded
Postgres in a temporary directory), loads ``--sessions`` × ``--turns`` generated
messages in batches the way ``bench.latency`` does (same generator, same seed), then
``--singles`` single-message posts to random sessions. The jobs those writes queue
(indexing, compression, promotion, embedding) wait. Then one ``mnemo worker`` starts on
the same database, alone on the machine's work, and the benchmark reports:

- the jobs waiting, by kind, and the seconds until none is queued or running;
- CPU seconds of the worker process and of its Postgres backends
  (``application_name`` ``mnemo-worker*``), in total and per job;
- the 1-minute load average when the worker started (other work on the box skews it).

The worker runs with the service's defaults (concurrency, batch sizes), not niced:
here nothing competes with it, so its wall time is its own cost.

The backlog must be the load's alone: the run stops with an error if the worker did not
stop (SIGSTOP, seen in /proc), if any job was done between its stop and the drain (one
run reported 186 of 200 compressions done before its drain: a drain of another mix of
jobs), or if the service exited meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench._service import REPO_ROOT, Service, running_service
from bench.hotpaths_adds import _cpu, _tree
from bench.latency import exchange, session_messages

BY_KIND = """
    SELECT kind, count(*) FILTER (WHERE status IN ('queued', 'running')) AS waiting,
           count(*) FILTER (WHERE status = 'done') AS done,
           count(*) FILTER (WHERE status = 'dead') AS dead
    FROM jobs GROUP BY kind ORDER BY kind
"""
WAITING = "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
BACKENDS = """
    SELECT pid FROM pg_stat_activity
    WHERE backend_type = 'client backend' AND application_name LIKE 'mnemo-worker%'
"""


def load(service: Service, args: argparse.Namespace, *, prefix: str, sessions: int) -> None:
    """The batched load and the single posts of ``bench.latency`` (its generator)."""
    rng = random.Random(args.seed)
    names = [f"{prefix}-s{i}" for i in range(sessions)]
    users = {s: f"{prefix}-u{i % max(1, sessions // 4)}" for i, s in enumerate(names)}
    counters = dict.fromkeys(names, args.turns + 1)
    singles = args.singles * sessions // args.sessions
    with httpx.Client(base_url=service.base_url, timeout=60) as client:
        for s in names:
            messages = session_messages(rng, s, args.turns)
            for i in range(0, len(messages), args.batch):
                body = {"user_id": users[s], "messages": messages[i : i + args.batch]}
                client.post(f"/v1/sessions/{s}/turns", json=body).raise_for_status()
        for _ in range(singles):
            s = rng.choice(names)
            seq = counters[s]
            counters[s] += 1
            message = exchange(rng, s, seq)[0 if rng.random() < 0.5 else 3]
            message["id"] = f"m-{seq}"
            body = {"user_id": users[s], "messages": [message]}
            client.post(f"/v1/sessions/{s}/turns", json=body).raise_for_status()


async def _fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


def _waiting(dsn: str) -> int:
    return int(asyncio.run(_fetch(dsn, WAITING))[0][0])


def _done(dsn: str) -> dict[str, int]:
    return {r["kind"]: r["done"] for r in asyncio.run(_fetch(dsn, BY_KIND))}


def _wait_drained(dsn: str, timeout_s: float, on_tick: Any = None) -> float | None:
    began = time.perf_counter()
    while time.perf_counter() - began < timeout_s:
        if on_tick is not None:
            on_tick()
        if not _waiting(dsn):
            return time.perf_counter() - began
        time.sleep(0.25)
    return None


def _wait_stopped(pid: int, timeout_s: float = 5.0) -> None:
    """Until ``pid`` is stopped (state T in /proc: SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker ({pid}) did not stop")
        time.sleep(0.01)


def start_worker(service: Service) -> subprocess.Popen[bytes]:
    """``mnemo worker`` on the service's database (its own process, as in production)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
    env |= {
        "MNEMO_DATA_DIR": str(service.data_dir),
        "MNEMO_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(REPO_ROOT),
    }
    with open(service.data_dir / "worker.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker"],
            cwd=service.data_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def measure(service: Service, args: argparse.Namespace) -> dict[str, Any]:
    dsn = f"postgresql://postgres@/mnemo?host={service.data_dir / 'pg'}"
    worker = start_worker(service)
    profiler = None
    try:
        # Warm-up: a few sessions drained, so the worker has imported and loaded
        # everything (the model included) before it is measured; then it is stopped
        # (SIGSTOP) while the load queues the backlog, and continued to drain it.
        load(service, args, prefix="warm", sessions=max(1, args.sessions // 50))
        if _wait_drained(dsn, args.timeout) is None:
            raise RuntimeError("the warm-up did not drain")
        time.sleep(1.0)
        worker.send_signal(signal.SIGSTOP)
        _wait_stopped(worker.pid)
        done_at_stop = _done(dsn)
        began = time.perf_counter()
        load(service, args, prefix="bench", sessions=args.sessions)
        loaded_s = time.perf_counter() - began
        waiting = {r["kind"]: r["waiting"] for r in asyncio.run(_fetch(dsn, BY_KIND))}
        done_before = _done(dsn)
        # The backlog is what the load queued: a job done meanwhile was run by someone.
        early = {k: n - done_at_stop.get(k, 0) for k, n in done_before.items()}
        if any(early.values()):
            raise RuntimeError(f"jobs done while the worker was stopped: {early}")
        if service.process is None or service.process.poll() is not None:
            # Its readiness was its port's: the load may have gone to another server.
            raise RuntimeError("mnemo serve exited during the load")
        backends = {int(r["pid"]): 0.0 for r in asyncio.run(_fetch(dsn, BACKENDS))}
        backends_before = {pid: _cpu(pid) for pid in backends}
        if args.profile is not None:
            # py-spy (``pip install py-spy``) samples the worker while it drains.
            profiler = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--format",
                    "raw",
                    "--rate",
                    "50",
                    "--nonblocking",
                    "-o",
                    str(args.profile),
                    "-p",
                    str(worker.pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        load_1m = os.getloadavg()[0]
        cpu_before = sum(_cpu(p) for p in _tree(worker.pid))
        worker.send_signal(signal.SIGCONT)

        def tick() -> None:
            for r in asyncio.run(_fetch(dsn, BACKENDS)):
                backends[int(r["pid"])] = _cpu(int(r["pid"]))

        drained = _wait_drained(dsn, args.timeout, tick)
        cpu = sum(_cpu(p) for p in _tree(worker.pid)) - cpu_before
        for pid in backends:  # their last reading (they live as long as the pool)
            backends[pid] = max(backends[pid], _cpu(pid))
        backends_cpu = sum(v - backends_before.get(pid, 0.0) for pid, v in backends.items())
        done = _done(dsn)
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(30)
        worker.send_signal(signal.SIGCONT)
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    ran = {k: n - done_before.get(k, 0) for k, n in done.items()}
    jobs = sum(ran.values())
    return {
        "parameters": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "load_s": round(loaded_s, 1),
        "jobs_waiting_after_load": waiting,
        "jobs_run": ran,
        "load_1m_at_drain_start": round(load_1m, 2),
        "drained_s": None if drained is None else round(drained, 1),
        "worker_cpu_s": round(cpu, 2),
        "worker_backends_cpu_s": round(backends_cpu, 2),
        "worker_cpu_ms_per_job": round(1000 * cpu / max(jobs, 1), 2),
        "backends_cpu_ms_per_job": round(1000 * backends_cpu / max(jobs, 1), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--singles", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", type=Path, help="py-spy's samples of the worker (raw)")
    args = parser.parse_args(argv)
    with running_service(extra_env={"MNEMO_EMBEDDED_WORKER": "false"}) as service:
        result = measure(service, args)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two checkouts of Mnemo served side by side on copies of one database.

    python -m bench.side_by_side DATA --code A --code B --out F
                                 [--rounds 10 --block 100] [--paths FILE] [--env NAME=VALUE]

DATA is an embedded data directory a benchmark kept (``python -m bench.latency
--keep-data`` prints it: 200 sessions whose worker caught up, so most context reads
carry a memory block). Each checkout (A, B: worktrees of this repository) is served by
``mnemo serve`` with no job worker on its own copy of DATA, made beside it and removed
after, so both read the same rows and nothing else writes them. Then blocks of one-client
reads alternate between the two (A B, B A, A B, …): whatever the box does in a minute
touches both sides alike. Reported per side: the median of its blocks' p50s, how many
rounds it was the faster one, its API's and its Postgres's CPU a read, this process's
CPU a read (the client: the same code for both sides, so it shows what the box's speed
did), and what the reads carried (bytes a read, reads with a memory block). The first
round compares every body read by read: a change that alters the output shows here.

``--other-data DIR`` serves B on a copy of another database: the one B's code built (a
schema change shows only on data written by the code that has it). The two then read
other contents (the worker compressed at other points): compare the bytes a read, and
serve one code on both databases (``--code X --code X``) to tell content from code.

The reads are ``bench.latency``'s context reads of its default workload (its session
names); ``--paths FILE`` takes request paths instead, one per line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from app.stores.embedded import stop_embedded
from bench import latency
from bench._results import write_result
from bench._service import Service

TICKS = os.sysconf("SC_CLK_TCK")


def postgres_cpu_s(data_dir: Path) -> float:
    """CPU of the Postgres serving ``data_dir``: its postmaster, its live children and
    the children it has reaped (a closed connection's backend)."""
    try:
        pid = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = 0.0
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat_path.read_text().rsplit(")", 1)[1].split()
            own = (int(fields[11]) + int(fields[12])) / TICKS
            if int(stat_path.parent.name) == pid:
                total += own + (int(fields[13]) + int(fields[14])) / TICKS
            elif int(fields[1]) == pid:
                total += own
    return total


class Side:
    """One checkout served on its own copy of the data."""

    def __init__(self, name: str, code: Path, data: Path, env: dict[str, str]) -> None:
        self.name = name
        self.copy = data.parent / f"{data.name}.side-{name}"
        shutil.rmtree(self.copy, ignore_errors=True)
        # cp -a, not shutil: the files belong to the user Postgres runs as, and stay so.
        subprocess.run(["cp", "-a", str(data), str(self.copy)], check=True)
        (self.copy / "pg" / "postmaster.pid").unlink(missing_ok=True)
        env = {"MNEMO_EMBEDDED_WORKER": "false"} | env
        self.service = Service(
            data_dir=self.copy, database_url=None, extra_env=env, ready_timeout_s=180, code=code
        )
        self.client: httpx.Client | None = None
        self.p50s: list[float] = []
        self.reads = 0
        self.api_s = 0.0
        self.pg_s = 0.0
        # This process's CPU over the reads alone (not the /proc walks around them): the
        # client is the same code for both sides, so it moves with the box's speed alone.
        self.client_s = 0.0

    def start(self) -> None:
        self.service.start()
        self.client = httpx.Client(base_url=self.service.base_url, timeout=60)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        self.service.stop()
        stop_embedded(self.copy)
        shutil.rmtree(self.copy, ignore_errors=True)

    def _api_cpu_s(self) -> float:
        sample = self.service.cpu_sample() or {}
        return sum(p.own_s for p in sample.values() if p.role == "api")

    def block(self, paths: Sequence[str]) -> tuple[list[float], list[bytes]]:
        """Reads ``paths`` one after another: their latencies (s) and bodies."""
        assert self.client is not None
        times, bodies = [], []
        api, pg = self._api_cpu_s(), postgres_cpu_s(self.copy)
        client = time.process_time()
        for path in paths:
            began = time.perf_counter()
            r = self.client.get(path)
            times.append(time.perf_counter() - began)
            r.raise_for_status()
            bodies.append(r.content)
        self.client_s += time.process_time() - client
        self.api_s += self._api_cpu_s() - api
        self.pg_s += postgres_cpu_s(self.copy) - pg
        self.reads += len(paths)
        return times, bodies


@contextlib.contextmanager
def served(sides: Sequence[Side]) -> Iterator[None]:
    try:
        for side in sides:
            side.start()
        yield
    finally:
        for side in sides:
            side.stop()


def default_paths() -> list[str]:
    """``bench.latency``'s context reads of its default workload, in its order."""
    work = latency.Workload.of(latency.parse_args(["--out", os.devnull]))
    return [f"/v1/sessions/{s}/context" for s in work.reads]


def measure(sides: Sequence[Side], paths: Sequence[str], rounds: int, block: int) -> dict[str, Any]:
    a, b = sides
    wins = {a.name: 0, b.name: 0}
    same = differ = 0
    # What each side's reads carried: with --other-data, the two contents differ.
    carried = {s.name: {"bytes": 0, "memories": 0} for s in sides}
    for side in sides:  # warm-up: first statements, caches, the pool
        side.block(paths[:block])
        side.p50s.clear()
        side.reads, side.api_s, side.pg_s, side.client_s = 0, 0.0, 0.0, 0.0
    for r in range(rounds):
        start = (r * block) % max(1, len(paths) - block + 1)
        chunk = paths[start : start + block]
        order = (a, b) if r % 2 == 0 else (b, a)
        p50 = {}
        bodies = {}
        for side in order:
            times, bodies[side.name] = side.block(chunk)
            seen = carried[side.name]
            seen["bytes"] += sum(len(body) for body in bodies[side.name])
            seen["memories"] += sum(latency.MEMORY_BLOCK in body for body in bodies[side.name])
            p50[side.name] = statistics.median(times) * 1000
            side.p50s.append(p50[side.name])
        wins[min(p50, key=p50.__getitem__)] += 1
        if r == 0:
            pairs = zip(bodies[a.name], bodies[b.name], strict=True)
            for x, y in pairs:
                same, differ = same + (x == y), differ + (x != y)
        print(
            f"round {r + 1}: p50 {a.name} {p50[a.name]:.2f} ms, {b.name} {p50[b.name]:.2f} ms",
            file=sys.stderr,
        )
    return {
        "sides": {
            s.name: {
                "code": str(s.service.code),
                "p50_ms_median": round(statistics.median(s.p50s), 3),
                "p50_ms_blocks": [round(v, 3) for v in s.p50s],
                "faster_rounds": wins[s.name],
                "api_cpu_ms_per_read": round(1000 * s.api_s / s.reads, 3),
                "postgres_cpu_ms_per_read": round(1000 * s.pg_s / s.reads, 3),
                "client_cpu_ms_per_read": round(1000 * s.client_s / s.reads, 3),
                "body_bytes_per_read": round(carried[s.name]["bytes"] / s.reads),
                "reads": s.reads,
                "reads_with_memories": carried[s.name]["memories"],
            }
            for s in sides
        },
        "bodies_compared": {"identical": same, "different": differ},
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.side_by_side",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("data", type=Path, help="an embedded data directory a benchmark kept")
    p.add_argument("--code", type=Path, action="append", required=True, help="twice: A, B")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--block", type=int, default=100, help="reads a side makes in a row")
    p.add_argument("--paths", type=Path, help="request paths, one per line")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument(
        "--other-data",
        type=Path,
        help="serve B on a copy of this database instead (the one B's code built): each"
        " code on its own data; the bodies may then differ",
    )
    args = p.parse_args(argv)
    if len(args.code) != 2:
        p.error("give --code twice")
    for data in (args.data, args.other_data or args.data):
        if not (data / "pg").is_dir():
            p.error(f"{data} holds no embedded Postgres (no pg/ inside)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    paths = (
        [line.strip() for line in args.paths.read_text().splitlines() if line.strip()]
        if args.paths
        else default_paths()
    )
    datas = [args.data.resolve(), (args.other_data or args.data).resolve()]
    sides = [Side(n, c.resolve(), d, env) for n, c, d in zip("AB", args.code, datas, strict=True)]
    load_before = os.getloadavg()[0]
    with served(sides):
        result = measure(sides, paths, args.rounds, args.block)
    result["parameters"] = {
        "data": str(args.data),
        "other_data": None if args.other_data is None else str(args.other_data),
        "rounds": args.rounds,
        "block": args.block,
        "reads": len(paths),
        "env": env,
    }
    result["machine"] = latency.machine() | {
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": os.getloadavg()[0],
    }
    for name, side in result["sides"].items():
        print(
            f"{name}: p50 median {side['p50_ms_median']:.2f} ms, faster in "
            f"{side['faster_rounds']} of {args.rounds} rounds, API CPU "
            f"{side['api_cpu_ms_per_read']:.2f} ms a read, Postgres "
            f"{side['postgres_cpu_ms_per_read']:.2f} ms, client "
            f"{side['client_cpu_ms_per_read']:.2f} ms; {side['body_bytes_per_read']} bytes a"
            f" read, {side['reads_with_memories']} of {side['reads']} with a memory"
            f" block  ({side['code']})"
        )
    print(f"bodies of the first round: {result['bodies_compared']}")
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where the slow reads of ``bench.latency`` come from: its run, with a probe in the server.

    python -m bench.tail --out tail.json [bench.latency's options]

Runs ``bench.latency`` as it is (same phases, same requests; each request also sends
an ``X-Request-Id``) with ``bench/_tailprobe`` loaded into the served processes
(``sitecustomize`` on their ``PYTHONPATH``; the app itself is not changed), and a
sampler of every process's CPU on the machine. Then, for the context phases
(``context``, ``context_caught_up``) and their ``/healthz`` floors, it splits each
read's client-side latency into what the server saw, on one monotonic clock:

- ``before``: from the client's send to the bytes reaching the server (the client's
  own loop, the kernel, the server's loop not reading yet);
- ``queue``: from the bytes read to the app entered (the event loop busy with others);
- ``checkout``, ``read_context``, ``memory_block``, ``pack``, ``json``: the read's own
  steps (their gaps: the rest of the Python between them, and waits for the loop);
- ``after``: from the body handed to the transport to the client's response.

``lag`` is how long the loop's timer was late meanwhile, ``lag_busy`` the part of it
the loop's thread was running (a callback held the loop, not the OS another process).

It prints, for the median read and the slowest 1 %, the mean of each part, and what
ran meanwhile: garbage collections, event-loop stalls, the job worker's jobs, and the
CPU of the other processes (Postgres, the worker, other work on the machine).
The probe costs CPU of its own: compare its figures with a plain ``bench.latency``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench import latency

PROBE = Path(__file__).resolve().parent / "_tailprobe"
SAMPLE_PERIOD_S = 0.05
LAG_PERIOD_S = 0.002  # the probe's timer (bench/_tailprobe/install.py)
PHASES = ("healthz", "context", "healthz_caught_up", "context_caught_up")

_phase = "setup"
_client: list[dict[str, Any]] = []


def _record(i: int, kind: str, t0: float, r: httpx.Response, rid: str) -> None:
    _client.append(
        {
            "phase": _phase,
            "i": i,
            "kind": kind,
            "t0": t0,
            "t1": time.perf_counter(),
            "status": r.status_code,
            "rid": rid,
            "memories": latency.MEMORY_BLOCK in r.content,
        }
    )


async def _get_context(
    self: latency.Workload, client: httpx.AsyncClient, i: int
) -> tuple[httpx.Response, int]:
    rid = f"{_phase}-{i}"
    t0 = time.perf_counter()
    r = await client.get(f"/v1/sessions/{self.reads[i]}/context", headers={"x-request-id": rid})
    _record(i, "context", t0, r, rid)
    return r, 1


async def _get_healthz(client: httpx.AsyncClient, i: int) -> tuple[httpx.Response, int]:
    rid = f"{_phase}-{i}"
    t0 = time.perf_counter()
    r = await client.get("/healthz", headers={"x-request-id": rid})
    _record(i, "healthz", t0, r, rid)
    return r, 1


_run_phase = latency.run_phase


async def _named_phase(name: str, *args: Any, **kwargs: Any) -> latency.Phase:
    global _phase
    _phase = name
    try:
        return await _run_phase(name, *args, **kwargs)
    finally:
        _phase = "between"


def _load(directory: Path, prefix: str) -> list[dict[str, Any]]:
    out = []
    for path in directory.glob(f"{prefix}-*.jsonl"):
        out += [json.loads(line) for line in path.read_text().splitlines() if line]
    return out


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def parts(client: dict[str, Any], server: dict[str, Any] | None) -> dict[str, float]:
    """One read's client latency split into the server's phases (ms)."""
    total = (client["t1"] - client["t0"]) * 1000
    if server is None or server.get("arrived") is None:
        return {"total": total}
    ms = {"total": total}
    ms["before"] = (server["arrived"] - client["t0"]) * 1000
    ms["queue"] = (server["entered"] - server["arrived"]) * 1000
    for name, t0, t1 in server["steps"]:
        ms[name] = ms.get(name, 0.0) + (t1 - t0) * 1000
    body_sent = server.get("body_sent", server["left"])
    ms["app"] = (body_sent - server["entered"]) * 1000
    ms["after"] = (client["t1"] - body_sent) * 1000
    return ms


def _during(events: list[dict[str, Any]], t0: float, t1: float, *, end: str = "s") -> float:
    """Seconds of ``events`` (each ``at`` with a duration) inside ``t0``..``t1`` (ms)."""
    return 1000 * sum(
        _overlap(t0, t1, e["at"], e["at"] + (e[end] if end in e else e.get("late", 0)))
        for e in events
    )


def _busy(lags: list[dict[str, Any]], t0: float, t1: float) -> float:
    """Of the loop's stalls inside ``t0``..``t1`` (ms), the share its thread ran (a
    callback held the loop); the rest it waited for a CPU (the OS ran other work)."""
    total = 0.0
    for e in lags:
        span = _overlap(t0, t1, e["at"], e["at"] + e["late"])
        if span:
            total += span * min(1.0, e.get("cpu", 0.0) / (e["late"] + LAG_PERIOD_S))
    return 1000 * total


def analyse(directory: Path) -> dict[str, Any]:
    api = _load(directory, "api")
    worker = _load(directory, "worker")
    by_rid = {r["rid"]: r for r in api if r.get("t") == "req" and "rid" in r}
    gcs = [r for r in api if r.get("t") == "gc"]
    lags = [r for r in api if r.get("t") == "lag"]
    jobs = [r for r in worker if r.get("t") == "job"]
    samples = [
        json.loads(line) for line in (directory / "cpu.jsonl").read_text().splitlines() if line
    ]
    names = _process_names(directory, api)
    report: dict[str, Any] = {}
    for phase in PHASES:
        reads = [c for c in _client if c["phase"] == phase]
        if not reads:
            continue
        rows = []
        for c in reads:
            s = by_rid.get(c["rid"])
            p = parts(c, s)
            t0, t1 = c["t0"], c["t1"]
            p["gc"] = _during(gcs, t0, t1)
            p["gc2"] = _during([g for g in gcs if g["gen"] == 2], t0, t1)
            p["lag"] = _during(lags, t0, t1, end="late")
            p["lag_busy"] = _busy(lags, t0, t1)
            p["jobs"] = sum(1 for j in jobs if _overlap(t0, t1, j["at"], j["at"] + j["s"]) > 0)
            p["memories"] = c["memories"]
            p["pool_out"] = (s or {}).get("pool_out", -1)
            p["bytes"] = (s or {}).get("bytes", 0)
            rows.append((c, p))
        rows.sort(key=lambda cp: cp[1]["total"])
        n = len(rows)
        tail = rows[n - max(1, n // 100) :]
        middle = rows[n // 2 - max(1, n // 100) // 2 : n // 2 + max(1, n // 100) // 2 + 1]
        began, ended = min(c["t0"] for c in reads), max(c["t1"] for c in reads)
        full = [g for g in gcs if g["gen"] == 2 and began <= g["at"] <= ended]
        report[phase] = {
            "n": n,
            "full_collections": len(full),
            "full_collections_ms": [round(g["s"] * 1000, 1) for g in full],
            "reads_in_flight_during_one": sum(1 for _, p in rows if p["gc2"] > 0),
            "p50_ms": rows[n // 2][1]["total"],
            "p99_ms": rows[min(n - 1, round(0.99 * n) - 1)][1]["total"],
            "median_reads": _mean_parts([p for _, p in middle]),
            "slowest_1pct": _mean_parts([p for _, p in tail]),
            "slowest": [
                {"t": round(c["t0"] - reads[0]["t0"], 3), **{k: _round(v) for k, v in p.items()}}
                for c, p in tail[-10:]
            ],
            "cpu_median": _cpu_during(samples, names, [c for c, _ in middle]),
            "cpu_slowest": _cpu_during(samples, names, [c for c, _ in tail]),
        }
    report["gc"] = _gc_summary(gcs)
    report["loop_stalls_largest"] = [
        {"ms": round(e["late"] * 1000, 1), "cpu_ms": round(e.get("cpu", 0) * 1000, 1)}
        for e in sorted(lags, key=lambda e: -e["late"])[:15]
    ]
    report["gc2_collections"] = [
        {"ms": round(g["s"] * 1000, 1), "cpu_ms": round(g.get("cpu", 0) * 1000, 1)}
        for g in gcs
        if g["gen"] == 2
    ]
    report["jobs"] = _jobs_summary(jobs)
    return report


def _round(v: Any) -> Any:
    return round(v, 2) if isinstance(v, float) else v


def _mean_parts(ps: list[dict[str, Any]]) -> dict[str, float]:
    keys = sorted({k for p in ps for k in p})
    return {k: round(statistics.fmean(float(p.get(k, 0)) for p in ps), 2) for k in keys}


def _process_names(directory: Path, api: list[dict[str, Any]]) -> dict[int, str]:
    names: dict[int, str] = {}
    for r in api:
        if r.get("t") == "backends":
            for pid, app_name, kind in r["rows"]:
                names[pid] = f"pg:{app_name or kind}"
    for path in directory.glob("*.jsonl"):
        role, _, pid = path.stem.partition("-")
        if pid.isdigit():
            names[int(pid)] = role
    names[os.getpid()] = "client"
    return names


def _cpu_during(
    samples: list[dict[str, Any]], names: dict[int, str], reads: list[dict[str, Any]]
) -> dict[str, float]:
    """CPU share (cores) by process group in the samples that end during ``reads``."""
    used: dict[str, float] = defaultdict(float)
    count = 0
    for c in reads:
        for s in samples:
            if c["t0"] <= s["at"] <= c["t1"] + SAMPLE_PERIOD_S:
                count += 1
                for pid, (comm, ticks) in s["used"].items():
                    name = names.get(int(pid)) or ("pg:other" if comm == "postgres" else comm)
                    used[name] += ticks / 100 / SAMPLE_PERIOD_S
    return {k: round(v / max(1, count), 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1])}


def _gc_summary(gcs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for gen in (0, 1, 2):
        times = sorted(g["s"] * 1000 for g in gcs if g["gen"] == gen)
        if times:
            out[f"gen{gen}"] = {
                "count": len(times),
                "p50_ms": round(times[len(times) // 2], 2),
                "max_ms": round(times[-1], 2),
                "total_ms": round(sum(times), 1),
            }
    return out


def _jobs_summary(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for j in jobs:
        kinds[j["kind"]].append(j)
    return {
        k: {
            "count": len(v),
            "wall_s": round(sum(j["s"] for j in v), 1),
            "cpu_s": round(sum(j["cpu"] for j in v), 1),
        }
        for k, v in kinds.items()
    }


def print_report(report: dict[str, Any]) -> None:
    for phase in PHASES:
        if phase not in report:
            continue
        r = report[phase]
        print(f"\n{phase}: {r['n']} reads, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms")
        print(
            f"  full collections in the phase: {r['full_collections']}"
            f" {r['full_collections_ms']} ms; reads in flight during one:"
            f" {r['reads_in_flight_during_one']}"
        )
        med, slow = r["median_reads"], r["slowest_1pct"]
        keys = [k for k in slow if k not in ("memories",)]
        print(f"  {'part (mean ms)':<18}{'median 1%':>12}{'slowest 1%':>12}")
        for k in keys:
            print(f"  {k:<18}{med.get(k, 0):>12.2f}{slow.get(k, 0):>12.2f}")
        share = (med.get("memories", 0), slow.get("memories", 0))
        print(f"  {'with memories':<18}{share[0]:>12.2f}{share[1]:>12.2f}")
        print(f"  cpu (cores) meanwhile, median: {r['cpu_median']}")
        print(f"  cpu (cores) meanwhile, slowest: {r['cpu_slowest']}")
    print(f"\ngc: {report['gc']}")
    print(f"full collections (wall, the loop's CPU): {report['gc2_collections']}")
    print(f"loop stalls, largest (wall, the loop's CPU): {report['loop_stalls_largest']}")
    print(f"jobs: {report['jobs']}")


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    directory = Path(tempfile.mkdtemp(prefix="mnemo-tail-"))
    os.environ["TAIL_PROBE_DIR"] = str(directory)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROBE), os.environ.get("PYTHONPATH")) if p
    )
    latency.Workload.get_context = _get_context  # type: ignore[method-assign]
    latency.get_healthz = _get_healthz
    latency.run_phase = _named_phase
    sampler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench._tailprobe.sampler",
            str(directory / "cpu.jsonl"),
            str(SAMPLE_PERIOD_S),
        ],
        env={k: v for k, v in os.environ.items() if k != "TAIL_PROBE_DIR"},
    )
    try:
        code = latency.main(args)
    finally:
        sampler.terminate()
        sampler.wait(5)
    (directory / "client.json").write_text(json.dumps(_client))
    report = analyse(directory)
    print_report(report)
    out = Path(args[args.index("--out") + 1]).with_suffix(".tail.json")
    out.write_text(json.dumps(report, indent=1))
    print(f"\nprobe records: {directory}; report: {out}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())

"""The 8-client phase's context reads in-process: CPU a read, a profile, the bodies.

    python -m bench.hotpaths_reads_context --data-dir D --prepare   # once
    python -m bench.context_cpu --data-dir D [--code DIR] [--query] [--profile F]
                                [--dump F] [--rounds 3] [--out FILE.json]

Works on a copy of the database ``bench.hotpaths_reads_context --prepare`` leaves
(``bench.latency``'s first phases; its stored units records stamped with the rules of
the code run), with the app built in this process (``create_app``, no job worker), its
whole middleware stack called as an ASGI app directly (no socket, no HTTP parser, no
client library): what is timed is the API's own work a read, in ``time.process_time``;
Postgres's CPU is read from /proc beside it. The reads are the 8-client phase's
(``Workload.reads``): its warm-up's and its own once untimed (the process's memos as
the phase leaves them), then its own ``--rounds`` times, timed. ``--query`` adds
``query=`` (two words picked by the read's number) to every read: the memory block's
search and embedding.

``--profile F`` writes a cProfile of one more pass (timed figures come from passes
without it); ``F.txt``: pyinstrument's tree of five more (``pip install
pyinstrument``). ``--dump F`` writes every body of the first timed pass, one a line
(``status<TAB>path<TAB>body``): two codes read the same bytes when the files are equal.
``--code DIR`` runs the ``app`` package of another checkout: alternate two codes (A B
A B) for a comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._results import write_result
from bench.hotpaths_reads_context import _args, database_for
from bench.latency import DEFAULTS, WARMUP_REQUESTS, WORDS, Workload, percentile
from bench.side_by_side import postgres_cpu_s


def _path(work: Workload, i: int, query: bool) -> tuple[str, bytes]:
    path = f"/v1/sessions/{work.reads[i]}/context"
    if not query:
        return path, b""
    return path, f"query={WORDS[i % len(WORDS)]}+{WORDS[(i * 7) % len(WORDS)]}".encode()


async def asgi_get(app: Any, path: str, query: bytes) -> tuple[int, bytes]:
    """One GET through the app's whole ASGI stack; its status and body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"bench"), (b"accept", b"*/*")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    status = 0
    body: list[bytes] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(body)


async def _profiled(app: Any, work: Workload, reads: range, query: bool, out: Path) -> None:
    """One more pass under cProfile (``out``), or, for ``out`` ending in ``.txt``,
    five under pyinstrument's sampler (installed apart: not a dependency)."""
    if out.suffix != ".txt":
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for i in reads:
            await asgi_get(app, *_path(work, i, query))
        profiler.disable()
        profiler.dump_stats(out)
        return
    from pyinstrument import Profiler

    sampler = Profiler(interval=0.0002, async_mode="disabled")
    sampler.start()
    for _ in range(5):
        for i in reads:
            await asgi_get(app, *_path(work, i, query))
    sampler.stop()
    text = sampler.output_text(unicode=True, show_all=False)
    await asyncio.to_thread(out.write_text, text, encoding="utf-8")


async def run(
    url: str,
    data_dir: Path,
    work: Workload,
    requests: int,
    *,
    query: bool,
    rounds: int,
    profile: Path | None,
    dump: Path | None,
) -> dict[str, Any]:
    from app.core.config import Settings
    from app.wiring import create_app

    settings = Settings(embedded_worker=False, log_level="WARNING")
    app = create_app(settings, database_url=url)
    measured = range(requests)
    async with app.router.lifespan_context(app):
        if query:
            warming = getattr(app.state.embedder, "warm_up", None)
            if warming is not None:
                await warming()
        for i in [*range(requests, requests + WARMUP_REQUESTS), *measured]:
            status, _ = await asgi_get(app, *_path(work, i, query))
            assert status == 200, status
        floor: list[float] = []
        for _ in range(200):
            began = time.process_time()
            await asgi_get(app, "/healthz", b"")
            floor.append((time.process_time() - began) * 1000)
        passes: list[list[float]] = []
        postgres = 0.0
        for r in range(rounds):
            gc.collect()
            cpu: list[float] = []
            began_pg = postgres_cpu_s(data_dir)
            bodies: list[str] = []
            for i in measured:
                path, q = _path(work, i, query)
                began = time.process_time()
                status, body = await asgi_get(app, path, q)
                cpu.append((time.process_time() - began) * 1000)
                if r == 0 and dump is not None:
                    bodies.append(f"{status}\t{path}?{q.decode()}\t{body.decode()}")
            postgres += postgres_cpu_s(data_dir) - began_pg
            passes.append(cpu)
            if bodies and dump is not None:
                text = "\n".join(bodies) + "\n"
                await asyncio.to_thread(dump.write_text, text, encoding="utf-8")
        if profile is not None:
            await _profiled(app, work, measured, query, profile)
    means = [statistics.fmean(p) for p in passes]
    every = sorted(ms for p in passes for ms in p)
    return {
        "reads": requests,
        "rounds": rounds,
        "query": query,
        "context_cpu_ms": {
            "mean_by_round": [round(m, 4) for m in means],
            "mean": round(statistics.fmean(means), 4),
            "p50": round(statistics.median(every), 4),
            "p99": round(percentile(every, 99), 4),
        },
        # The embedded Postgres's CPU over the timed passes, a read (its clock ticks
        # are 10 ms: a pass of 2,000 reads resolves 5 us).
        "postgres_cpu_ms": round(postgres / (rounds * requests) * 1000, 4),
        "healthz_cpu_ms": {
            "mean": round(statistics.fmean(floor), 4),
            "p50": round(statistics.median(floor), 4),
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.context_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--code", type=Path, default=None, help="a checkout whose app to run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--query", action="store_true", help="read with query=")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    work = Workload.of(_args(args.seed))
    requests = DEFAULTS["requests"]
    url, code = database_for(args.code, args.data_dir)
    result = asyncio.run(
        run(
            url,
            args.data_dir.resolve(),
            work,
            requests,
            query=args.query,
            rounds=args.rounds,
            profile=args.profile,
            dump=args.dump,
        )
    )
    result["code"] = code
    cpu, floor = result["context_cpu_ms"], result["healthz_cpu_ms"]
    print(
        f"{result['code']}{' query' if args.query else ''}: context read CPU mean {cpu['mean']}"
        f" ms (rounds {cpu['mean_by_round']}), p50 {cpu['p50']}, p99 {cpu['p99']};"
        f" Postgres {result['postgres_cpu_ms']} ms a read; /healthz mean {floor['mean']} ms"
    )
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

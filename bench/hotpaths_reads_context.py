"""The one-client context read's CPU in-process, on the database bench.latency leaves.

    python -m bench.hotpaths_reads_context --data-dir D --prepare   # once
    python -m bench.hotpaths_reads_context --data-dir D [--code DIR] [--out FILE.json]

``--prepare`` runs ``bench.latency``'s first phases (the load, the single posts, the
floor, the 8-client context reads; its defaults and seed) against ``mnemo serve`` with
its job worker, on an embedded Postgres in ``D``, and stops the service there: the
database is as ``bench.latency``'s one-client phase finds it, the worker's backlog
(most live user turns not indexed yet) included.

A run then works on a copy of that database (``CREATE DATABASE … TEMPLATE``), with the
app built in this process (``create_app``: no job worker, the configured embedder),
reached through httpx's ASGI transport (no socket, no HTTP parser), one request at a
time:

1. the 8-client phase's context reads again, untimed: the server had made them, so the
   process's memos are as the one-client phase found them;
2. the one-client phase's single posts, untimed;
3. the one-client phase's floor (``/healthz``) and its context reads, each timed in
   CPU (``time.process_time``: the app's, the transport's and the client's work; not
   Postgres's); then the same reads once more (every memo of the process warm).

It prints the CPU per context read (p50, mean, p99), the same less the floor's p50, and
how many live user turns of the sessions read have no stored units (the read reads those
from their text; the copy's stored records are stamped as the code run would have
stamped them: see ``copy_database``). ``--profile F`` writes a cProfile of the timed
reads (their CPU figures then include the profiler's). The job worker does not run
during a run: in ``bench.latency`` it runs beside the one-client phase, so a few of its
compressions and index jobs land there that do not here. ``--code DIR`` measures the
``app`` package of another checkout on the same database: an A/B pair is two runs,
alternated.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from sqlalchemy.engine import URL, make_url

from app.stores.embedded import stop_embedded
from bench._results import write_result
from bench._service import Service
from bench.latency import (
    DEFAULTS,
    WARMUP_REQUESTS,
    Workload,
    first_phases,
    get_healthz,
    percentile,
)

COPY = "mnemo_hotpaths_run"


def _args(seed: int) -> argparse.Namespace:
    return argparse.Namespace(seed=seed, **DEFAULTS)


async def prepare(data_dir: Path, work: Workload, requests: int) -> None:
    """``bench.latency``'s first phases against ``mnemo serve`` on ``data_dir``."""
    service = Service(data_dir=data_dir, database_url=None, extra_env={}, ready_timeout_s=180.0)
    service.start()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [
        httpx.AsyncClient(base_url=service.base_url, limits=limits, timeout=60.0)
        for _ in range(DEFAULTS["clients"])
    ]
    try:
        phases = await first_phases(service, clients, work, requests)
        for name, phase in phases.items():
            print(f"{name}: p50 {phase.p50_ms} ms, {phase.jobs_waiting_after} jobs waiting")
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
        service.stop()
        stop_embedded(data_dir)


async def copy_database(url: str, stamp: str | None) -> str:
    """A fresh copy of the prepared database; its URL. ``stamp``: the stored units
    records are given the stamp of the rules of the code run (``RULES_STAMP``), as if
    that code had stored them: the codes compared extract the same units, but any edit
    to the extractor or ``live_notes`` changes the stamp, and a record stamped by
    other rules is read again from the text on every read."""
    prepared = make_url(url)
    admin = await asyncpg.connect(_driver_url(prepared.set(database="postgres")))
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {COPY}")
        await admin.execute(f"CREATE DATABASE {COPY} TEMPLATE {prepared.database}")
    finally:
        await admin.close()
    copy = prepared.set(database=COPY)
    if stamp is not None:
        db = await asyncpg.connect(_driver_url(copy))
        try:
            await db.execute(
                "UPDATE turns SET units = jsonb_set(units, '{rules}', to_jsonb($1::text))"
                " WHERE units ? 'rules'",
                stamp,
            )
        finally:
            await db.close()
    return copy.render_as_string(hide_password=False)


def database_for(code: Path | None, data_dir: Path) -> tuple[str, str]:
    """A fresh copy of the database prepared in ``data_dir`` (its embedded server started
    here: it stops when this process exits), stamped by the rules of ``code``'s ``app``
    (this checkout's when None, else that checkout's, imported in its place); the copy's
    URL and the checkout whose ``app`` this process now runs."""
    if code is not None:
        # The other checkout's app, not the one bench._service imported.
        sys.path.insert(0, str(code.resolve()))
        for name in [m for m in sys.modules if m == "app" or m.startswith("app.")]:
            del sys.modules[name]
    import app
    from app.compression import live_notes
    from app.stores.embedded import start_embedded

    stamp = getattr(live_notes, "RULES_STAMP", None)
    url = asyncio.run(copy_database(start_embedded(data_dir.resolve()), stamp))
    return url, str(Path(app.__file__).parents[1])


def _driver_url(url: URL) -> str:
    """A SQLAlchemy URL as asyncpg takes it."""
    return str(url.set(drivername="postgresql").render_as_string(hide_password=False))


async def unread_turns(url: str, sessions: Sequence[str]) -> tuple[int, int]:
    """Live user turns of ``sessions`` with no stored units, and all of them."""
    db = await asyncpg.connect(_driver_url(make_url(url)))
    try:
        row = await db.fetchrow(
            """SELECT count(*) FILTER (WHERE t.units IS NULL) AS unread, count(*) AS live
                 FROM turns t JOIN sessions s ON s.id = t.session_id
                WHERE s.external_id = ANY($1::text[]) AND NOT t.compacted
                  AND t.role = 'user' AND t.content IS NOT NULL""",
            list(set(sessions)),
        )
    finally:
        await db.close()
    assert row is not None
    return int(row["unread"]), int(row["live"])


Request = Callable[[httpx.AsyncClient, int], Awaitable[tuple[httpx.Response, int]]]


async def untimed(client: httpx.AsyncClient, request: Request, indices: Sequence[int]) -> None:
    for i in indices:
        response, _ = await request(client, i)
        response.raise_for_status()


async def timed(client: httpx.AsyncClient, request: Request, indices: range) -> list[float]:
    """CPU ms of each request, one at a time."""
    out = []
    for i in indices:
        began = time.process_time()
        response, _ = await request(client, i)
        out.append((time.process_time() - began) * 1000)
        response.raise_for_status()
    return out


async def run(
    url: str, work: Workload, requests: int, profile: Path | None = None
) -> dict[str, Any]:
    from app.core.config import Settings
    from app.wiring import create_app

    settings = Settings(embedded_worker=False, log_level="WARNING")
    app = create_app(settings, database_url=url)
    serial = max(1, requests // 4)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            first = requests + WARMUP_REQUESTS
            await untimed(client, work.get_context, [*range(requests, first), *range(requests)])
            await untimed(client, work.post_one, range(first, first + serial))
            floor = await timed(client, get_healthz, range(serial))
            if profile is not None:
                profiler = cProfile.Profile(time.process_time)
                profiler.enable()
            reads = await timed(client, work.get_context, range(serial))
            if profile is not None:
                profiler.disable()
                profiler.dump_stats(profile)
            again = await timed(client, work.get_context, range(serial))
    ordered = sorted(reads)
    unread, live = await unread_turns(url, work.reads[:serial])
    return {
        "reads": serial,
        "context_cpu_ms": {
            "p50": round(statistics.median(reads), 3),
            "mean": round(statistics.fmean(reads), 3),
            "p99": round(percentile(ordered, 99), 3),
        },
        # The same reads once more: every memo of the process warm.
        "again_cpu_ms": {
            "p50": round(statistics.median(again), 3),
            "mean": round(statistics.fmean(again), 3),
        },
        "healthz_cpu_ms_p50": round(statistics.median(floor), 3),
        "context_less_floor_ms": {
            "p50": round(statistics.median(reads) - statistics.median(floor), 3),
            "mean": round(statistics.fmean(reads) - statistics.median(floor), 3),
        },
        "live_user_turns_unread": unread,
        "live_user_turns": live,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hotpaths_reads_context",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--prepare", action="store_true")
    parser.add_argument("--code", type=Path, default=None, help="a checkout whose app to run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--profile", type=Path, default=None, help="cProfile the timed reads into this file"
    )
    args = parser.parse_args(argv)
    work = Workload.of(_args(args.seed))
    requests = DEFAULTS["requests"]
    if args.prepare:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        asyncio.run(prepare(args.data_dir.resolve(), work, requests))
        return 0
    url, code = database_for(args.code, args.data_dir)
    result = asyncio.run(run(url, work, requests, args.profile))
    result["code"] = code
    cpu, less = result["context_cpu_ms"], result["context_less_floor_ms"]
    print(
        f"{result['code']}: one-client context read CPU p50 {cpu['p50']} ms, mean"
        f" {cpu['mean']} ms, p99 {cpu['p99']} ms; less the /healthz floor"
        f" ({result['healthz_cpu_ms_p50']} ms) p50 {less['p50']} ms, mean {less['mean']} ms;"
        f" {result['live_user_turns_unread']} of {result['live_user_turns']} live user turns"
        " of the sessions read had no stored units; the same reads again: p50"
        f" {result['again_cpu_ms']['p50']} ms, mean {result['again_cpu_ms']['mean']} ms"
    )
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

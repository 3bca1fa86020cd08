"""`mnemo serve | worker | migrate | keys | reembed | jobs`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.config import Settings
from app.core.logs import configure as configure_logging
from app.supervisor import STANDBY_FLAG, wait_until_promoted

if TYPE_CHECKING:
    from fastapi import FastAPI
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from app.core.metrics import Metrics


def resolve_database_url(settings: Settings) -> str:
    """The configured database, or the embedded one (started here) when none is."""
    if settings.async_database_url:
        return settings.async_database_url
    from app.stores.embedded import start_embedded

    return start_embedded(settings.data_dir)


def prepare_database(settings: Settings) -> str:
    """The database URL, with the embedded database started and migrated if it is the one.

    A configured database is migrated only by `mnemo migrate`, a separate deployment step.
    """
    url = resolve_database_url(settings)
    if not settings.async_database_url:
        asyncio.run(_migrate(url))
    return url


async def _migrate(url: str) -> None:
    from app.stores.engine import make_engine
    from app.stores.migrate import upgrade_to_head

    engine = make_engine(url, pool_size=1)
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()


def cmd_migrate(settings: Settings, _: argparse.Namespace) -> int:
    url = resolve_database_url(settings)
    asyncio.run(_migrate(url))
    print("migrations applied", file=sys.stderr)
    asyncio.run(_bootstrap_key(url, settings))
    if not asyncio.run(_keys_exist(url)):
        print(
            "no API key exists yet: `mnemo serve` answers on loopback only. For a server,"
            " set MNEMO_BOOTSTRAP_KEY (from `mnemo keys generate`) or run"
            " `mnemo keys create --tenant NAME --scope admin`",
            file=sys.stderr,
        )
    return 0


async def _bootstrap_key(url: str, settings: Settings) -> None:
    """Install MNEMO_BOOTSTRAP_KEY(_FILE) if the database never had a key (first run)."""
    key = settings.initial_key()
    if key is None:
        return
    from app.stores.api_keys import bootstrap_key
    from app.stores.engine import make_engine

    engine = make_engine(url, pool_size=1)
    try:
        async with engine.begin() as conn:
            added = await bootstrap_key(conn, key=key, tenant=settings.bootstrap_tenant)
    finally:
        await engine.dispose()
    if added:
        print(
            f"bootstrap admin key installed for tenant {settings.bootstrap_tenant!r}",
            file=sys.stderr,
        )


async def _keys_exist(url: str) -> bool:
    from app.stores.api_keys import keys_configured
    from app.stores.engine import make_engine

    engine = make_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return await keys_configured(conn)
    finally:
        await engine.dispose()


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from app.core.config import is_loopback

    settings = settings.model_copy(
        update={k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    )
    url = prepare_database(settings)
    asyncio.run(_bootstrap_key(url, settings))
    if (
        not is_loopback(settings.host)
        and not settings.insecure_allow_no_keys
        and not asyncio.run(_keys_exist(url))
    ):
        print(
            f"refusing to serve on {settings.host} with no API keys: anyone on the network"
            " could read every session.\nCreate one first:  mnemo keys create --tenant NAME"
            "\n(or set MNEMO_BOOTSTRAP_KEY to the output of `mnemo keys generate`)"
            "\n(or bind 127.0.0.1; MNEMO_INSECURE_ALLOW_NO_KEYS=true overrides, unsafely)",
            file=sys.stderr,
        )
        return 2
    _exit_cleanly_on_sigterm()
    if args.workers > 1 or (settings.embedded_worker and settings.worker_process):
        return _serve_processes(settings, url, args.workers)
    import uvicorn

    from app.wiring import create_app

    app = create_app(settings, database_url=url)
    uvicorn.run(app, **_uvicorn_options(settings))
    return 0


def _exit_cleanly_on_sigterm() -> None:
    """SIGTERM ends this process through ``SystemExit``, so exit handlers run.

    uvicorn shuts down gracefully on SIGTERM and then raises the signal again with the
    handler that was installed before it ran. With the default handler the process dies of
    the signal and skips ``atexit``, where the embedded Postgres this process started is
    stopped: it would outlive ``mnemo serve`` (``docker stop``, systemd, Ctrl-C excepted).
    """

    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


def _uvicorn_options(settings: Settings) -> dict[str, Any]:
    return {
        "host": settings.host,
        "port": settings.port,
        # Past every common client's idle expiry, so the client gives a connection up
        # first (uvicorn's 5 s equals httpx's: a post sent at that moment was lost).
        "timeout_keep_alive": settings.keep_alive_s,
        "log_level": settings.log_level.lower(),
        "log_config": None,  # keep our JSON handler
        "access_log": False,  # ours carries the request id and route template
    }


def _serve_processes(settings: Settings, url: str, workers: int) -> int:
    """N API processes on one socket (N = 1: this one), and the job worker in exactly one
    process beside them.

    This process owns the embedded database (started, migrated and stopped here) and
    supervises: uvicorn spawns the API processes, which build their app from the
    environment with the database URL this process resolved and their embedded worker
    off; when the embedded worker is on, one ``mnemo worker`` process runs the jobs.
    With one API process, it is this one. A separate worker keeps the embedding model
    and the compressions off the API process's CPU and GIL.
    """
    import uvicorn

    os.environ["MNEMO_DATABASE_URL"] = url
    from app.supervisor import (
        KeptAlive,
        LagGuard,
        Limits,
        WorkerMode,
        check_every,
        mode_environment,
    )

    worker = guard = None
    published = temporary = None
    if settings.embedded_worker:
        # The worker's counters (compressions, jobs, …) reach the API's /metrics through
        # a file it publishes them to: a scrape reads it, without asking the worker. In
        # the data folder with the embedded database (what a SIGKILL leaves is replaced
        # at the next start), else in a temporary folder.
        if settings.async_database_url:
            temporary = Path(tempfile.mkdtemp(prefix="mnemo-metrics-"))
            published = temporary / "worker.json"
        else:
            published = settings.data_dir.resolve() / "worker-metrics.json"
        os.environ["MNEMO_WORKER_METRICS_FILE"] = str(published)
        settings = settings.model_copy(update={"worker_metrics_file": published})
        command = [sys.executable, "-m", "app.cli", "worker", "--supervised-by", str(os.getpid())]
        if not settings.async_database_url:
            command.append("--embedded-database")  # started by this process, on this host
        guarded = settings.worker_idle and settings.worker_lag_limit_s > 0
        limits = Limits(settings.worker_lag_limit_s, settings.worker_units_lag_limit_s)
        # A units job is late within seconds: a spare worker at the units' niceness waits
        # started beside the idle-class one, so that the switch is not a start.
        nice = {"nice": settings.worker_nice, "units_nice": settings.worker_units_nice}
        spare = None
        if guarded and limits.units_s > 0:
            spare = mode_environment(WorkerMode.NICED_FOR_UNITS, **nice)
        worker = KeptAlive(command, standby_env=spare)
        worker.start()
        if guarded:
            # An idle-class worker never runs on a machine whose CPU is never idle: past
            # the limit, it is replaced by one at its niceness alone (app/supervisor.py).
            every_s = check_every(limits)
            guard = LagGuard(worker, url, limits=limits, every_s=every_s, **nice)
            guard.start()
    os.environ["MNEMO_EMBEDDED_WORKER"] = "false"
    try:
        if workers > 1:
            from uvicorn.supervisors import Multiprocess

            config = uvicorn.Config(
                "app.cli:api_from_environment",
                factory=True,
                workers=workers,
                **_uvicorn_options(settings),
            )
            Multiprocess(config, sockets=[own_listener(settings.host, settings.port)]).run()
        else:
            from app.wiring import create_app

            api = settings.model_copy(update={"embedded_worker": False})
            uvicorn.run(create_app(api, database_url=url), **_uvicorn_options(settings))
    finally:
        if guard is not None:
            guard.stop()
        if worker is not None:
            worker.stop()
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        elif published is not None:
            published.unlink(missing_ok=True)
    return 0


class OwnListener(socket.socket):
    """The listening socket of each API process of ``mnemo serve --workers N``.

    uvicorn hands its API processes one socket (pickled to each, spawned). With one
    socket shared, the process that wakes first accepts every connection waiting:
    8 keep-alive clients landed 8/0, 7/1 or 6/2 on two processes, and the second
    process served one or two of them. Pickled, this one arrives in each process as a
    socket of its own, bound to the same address with ``SO_REUSEPORT``: the kernel
    spreads new connections over the processes. The supervisor's own is bound, never
    listening (it holds the address and receives no connection).
    """

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        host, port = self.getsockname()[:2]
        return own_listener, (host, port)


def own_listener(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` with ``SO_REUSEPORT`` (``OwnListener``)."""
    sock = OwnListener(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def api_from_environment() -> FastAPI:
    """The app of one API process of ``mnemo serve --workers N`` (uvicorn's factory)."""
    from app.wiring import create_app

    settings = Settings()
    configure_logging(settings.log_level, json_logs=settings.log_json)
    assert settings.async_database_url, "set by the supervising `mnemo serve`"
    return create_app(settings, database_url=settings.async_database_url)


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from app.core.priority import lower_process

    # Given by the supervisor, not read here: it may be gone before this line runs.
    parent = args.supervised_by
    if parent is not None:
        # The API beside it is served first, from the start (imports, the model's load):
        # every thread, and the ones started later inherit it (the model's BLAS pool).
        lower_process(settings.worker_nice, idle=settings.worker_idle)
    from prometheus_client import start_http_server

    from app.core import tracing
    from app.core.metrics import Metrics
    from app.providers.http11 import outbound_client
    from app.services.memories import check_stored_models
    from app.stores.engine import make_engine, renice_backends
    from app.wiring import build_embedder_from_settings, build_worker

    url = prepare_database(settings)
    backend_nice = settings.worker_nice if args.supervised_by and args.embedded_database else 0
    if args.standby and not wait_until_promoted():
        return 0  # serve is stopping, or replaced this standby: it never worked

    async def run() -> None:
        engine = make_engine(url, pool_size=settings.worker_concurrency + 2, name="mnemo-worker")
        if backend_nice:
            # The worker's queries and writes run in Postgres processes of its own: niced
            # like the worker, they leave the CPU to the API's first, as the worker does.
            renice_backends(engine, backend_nice)
        tracing.setup(settings.tracing)
        tracing.instrument_engine(engine)
        http = outbound_client(settings.outbound_http)
        embedder = build_embedder_from_settings(settings, http)
        if embedder is not None:
            async with engine.connect() as conn:
                await check_stored_models(conn, embedder)
        metrics = Metrics()
        if settings.worker_metrics_port is not None:
            try:
                start_http_server(
                    settings.worker_metrics_port,
                    addr=settings.worker_metrics_host,
                    registry=metrics.registry,
                )
            except OSError as exc:
                if parent is None:
                    raise  # a worker of its own: its configuration is wrong, say so
                # `mnemo serve`'s worker on the port serve picked, taken meanwhile: the
                # jobs matter more than the counters (a restart would fail the same way).
                print(f"mnemo worker: no metrics server ({exc}); running without", file=sys.stderr)
        worker = build_worker(settings, engine, http=http, metrics=metrics, embedder=embedder)
        worker.backend_nice = backend_nice
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if parent is None:
            loop.add_signal_handler(signal.SIGINT, stop.set)
        else:
            # Ctrl-C reaches the whole process group: the supervisor stops us (SIGTERM)
            # once its API is down, rather than the worker leaving first.
            loop.add_signal_handler(signal.SIGINT, lambda: None)
        orphaned = None
        if parent is not None:
            orphaned = asyncio.create_task(_stop_when_orphaned(parent, stop))
        publishing = None
        if settings.worker_metrics_file is not None:
            publishing = asyncio.create_task(
                _publish_metrics(metrics, settings.worker_metrics_file, stop)
            )
        try:
            if args.once:
                await worker.drain(stop)
            else:
                await worker.run(stop)
        finally:
            if orphaned is not None:
                orphaned.cancel()
            if publishing is not None:
                stop.set()
                await publishing  # once more, with the last jobs' counters
            await http.aclose()
            await engine.dispose()

    asyncio.run(run())
    return 0


async def _publish_metrics(metrics: Metrics, path: Path, stop: asyncio.Event) -> None:
    """Publish the worker's counters to ``path`` every ``PUBLISH_EVERY_S`` when they
    changed, and once more when ``stop`` is set (``core.metrics.publish``)."""
    from app.core.metrics import PUBLISH_EVERY_S, publish

    last = None
    while True:
        try:
            last = publish(metrics, path, last=last)
        except OSError as exc:  # the supervisor's folder is gone: it is stopping us
            print(f"mnemo worker: counters not published ({exc})", file=sys.stderr)
        if stop.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PUBLISH_EVERY_S)


async def _stop_when_orphaned(parent: int, stop: asyncio.Event, every_s: float = 0.5) -> None:
    """Set ``stop`` once ``parent`` is no longer this process's parent (a process whose
    parent dies is reparented): a ``mnemo serve`` killed with SIGKILL cannot stop its
    worker."""
    while not stop.is_set():
        if os.getppid() != parent:
            print("mnemo worker: the supervising process is gone; stopping", file=sys.stderr)
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


def cmd_keys(settings: Settings, args: argparse.Namespace) -> int:
    from app.stores import api_keys as keys
    from app.stores.engine import make_engine

    if args.keys_command == "generate":  # no database: the operator installs it later
        print(keys.new_key()[1])
        return 0
    url = prepare_database(settings)

    async def run() -> int:
        engine = make_engine(url, pool_size=1)
        try:
            async with engine.begin() as conn:
                if args.keys_command == "create":
                    key = await keys.create_key(
                        conn,
                        tenant=args.tenant,
                        scope=args.scope,
                        label=args.label,
                        agent=args.agent,
                    )
                    print(key)
                    print("store it now: it is not shown again", file=sys.stderr)
                elif args.keys_command == "revoke":
                    if not await keys.revoke_key(conn, key_id=args.key_id):
                        print(f"no active key {args.key_id}", file=sys.stderr)
                        return 1
                    print(f"revoked {args.key_id}", file=sys.stderr)
                else:
                    for k in await keys.list_keys(conn):
                        state = f"revoked {k.revoked_at:%Y-%m-%d}" if k.revoked_at else "active"
                        agent = f"agent={k.agent}" if k.agent else ""
                        print(
                            f"{k.id}\t{k.tenant_id}\t{k.scope}\t{state}\t{k.label or ''}\t{agent}"
                        )
            return 0
        finally:
            await engine.dispose()

    return asyncio.run(run())


def cmd_misses(settings: Settings, args: argparse.Namespace) -> int:
    """Print the miss samples as JSONL: what was needed, the compacted turns it was
    restored from, the state at the time (for improving rules or training an extractor)."""
    import json

    from app.stores import misses
    from app.stores.engine import make_engine

    url = prepare_database(settings)

    async def run() -> int:
        engine = make_engine(url, pool_size=1)
        n = 0
        try:
            async with engine.connect() as conn:
                async for sample in misses.export(conn, tenant=args.tenant):
                    print(json.dumps(sample, ensure_ascii=False))
                    n += 1
        finally:
            await engine.dispose()
        print(f"{n} samples", file=sys.stderr)
        return 0

    return asyncio.run(run())


def cmd_reembed(settings: Settings, args: argparse.Namespace) -> int:
    from app.providers.http11 import outbound_client
    from app.services.memories import reembed
    from app.stores.engine import make_engine
    from app.wiring import build_embedder_from_settings

    url = prepare_database(settings)

    async def run() -> int:
        engine = make_engine(url, pool_size=1)
        try:
            async with outbound_client(settings.outbound_http) as http:
                embedder = build_embedder_from_settings(settings, http)
                if embedder is None:
                    print("no embedder configured (MNEMO_EMBEDDER=none)", file=sys.stderr)
                    return 1
                async with engine.begin() as conn:
                    n = await reembed(conn, embedder, max_attempts=settings.job_max_attempts)
            print(f"{n} memories queued for re-embedding with {embedder.model_id}", file=sys.stderr)
            if args.wait:
                return await _watch_embeddings(engine, timeout_s=args.timeout)
            return 0
        finally:
            await engine.dispose()

    return asyncio.run(run())


PROGRESS_WIDTH = 30


def progress_bar(done: int, total: int) -> str:
    """``[#########.....]  300/500 (60%)``"""
    share = done / total if total else 1.0
    filled = round(share * PROGRESS_WIDTH)
    return f"[{'#' * filled}{'.' * (PROGRESS_WIDTH - filled)}] {done}/{total} ({share:.0%})"


async def _watch_embeddings(engine: AsyncEngine, *, timeout_s: float, poll_s: float = 1.0) -> int:
    """Wait for the workers (`mnemo serve` or `mnemo worker`) to embed every memory,
    drawing a progress bar; 1 when embedding jobs died or the time ran out."""
    from app.stores.memories import embedding_progress

    deadline = time.monotonic() + timeout_s
    total = None
    while True:
        async with engine.connect() as conn:
            p = await embedding_progress(conn)
        total = p.missing if total is None else max(total, p.missing)
        print(f"\r{progress_bar(total - p.missing, total)}", end="", file=sys.stderr, flush=True)
        if p.missing == 0:
            print(file=sys.stderr)
            return 0
        if p.waiting_jobs == 0:
            print(
                f"\n{p.missing} memories still have no vector and no embedding job waits"
                f" ({p.dead_jobs} dead: `mnemo jobs list --status dead --kind embed_memories`)",
                file=sys.stderr,
            )
            return 1
        if time.monotonic() > deadline:
            print(f"\ngave up after {timeout_s:.0f} s; is a worker running?", file=sys.stderr)
            return 1
        await asyncio.sleep(poll_s)


def cmd_jobs(settings: Settings, args: argparse.Namespace) -> int:
    """`mnemo jobs list | stats | requeue | prune`: the queue, for an operator."""
    from app.stores.engine import make_engine

    url = prepare_database(settings)

    async def run() -> int:
        engine = make_engine(url, pool_size=1)
        try:
            async with engine.begin() as conn:
                return await JOB_COMMANDS[args.jobs_command](conn, args)
        finally:
            await engine.dispose()

    return asyncio.run(run())


async def _jobs_list(conn: AsyncConnection, args: argparse.Namespace) -> int:
    from app.stores import queue

    rows = await queue.list_jobs(
        conn, tenant=args.tenant, status=args.status, kind=args.kind, limit=args.limit
    )
    print("id\ttenant\tkind\tstatus\tattempts\tsession\tupdated\terror")
    for j in rows:
        when = j.finished_at or j.locked_until or j.run_after
        error = (j.last_error or "").replace("\n", " ")[:120]
        print(
            f"{j.id}\t{j.tenant_id}\t{j.kind}\t{j.status}\t{j.attempts}/{j.max_attempts}"
            f"\t{j.session or ''}\t{when:%Y-%m-%d %H:%M:%S}\t{error}"
        )
    return 0


async def _jobs_stats(conn: AsyncConnection, args: argparse.Namespace) -> int:
    from app.stores import queue

    print("kind\tqueued\trunning\tdead\tdone\toldest_queued_s")
    for k in await queue.kind_stats(conn, tenant=args.tenant):
        oldest = "" if k.oldest_queued_s is None else f"{k.oldest_queued_s:.0f}"
        print(f"{k.kind}\t{k.queued}\t{k.running}\t{k.dead}\t{k.done}\t{oldest}")
    return 0


async def _jobs_requeue(conn: AsyncConnection, args: argparse.Namespace) -> int:
    from app.stores import queue

    ids = list(args.ids)
    if args.all_dead:
        ids += await queue.dead_job_ids(conn, tenant=args.tenant, kind=args.kind)
    if not ids:
        print("nothing to requeue (give job ids or --all-dead)", file=sys.stderr)
        return 1
    refused = [
        i for i in dict.fromkeys(ids) if not await queue.requeue(conn, job_id=i, tenant=None)
    ]
    print(f"requeued {len(set(ids)) - len(refused)}", file=sys.stderr)
    if refused:
        print(f"not requeued (not dead, or an equal job already waits): {refused}", file=sys.stderr)
    return 1 if refused else 0


async def _jobs_prune(conn: AsyncConnection, args: argparse.Namespace) -> int:
    from app.stores import queue

    statuses = ("done", "dead") if args.dead else ("done",)
    total = 0
    while n := await queue.prune(
        conn, older_than_s=args.older_than_days * 86400, statuses=statuses
    ):
        total += n
    print(f"pruned {total} {' and '.join(statuses)} jobs", file=sys.stderr)
    return 0


JOB_COMMANDS = {
    "list": _jobs_list,
    "stats": _jobs_stats,
    "requeue": _jobs_requeue,
    "prune": _jobs_prune,
}


def _add_jobs_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = sub.add_parser("jobs", help="list, count, requeue and prune background jobs")
    jobs.set_defaults(func=cmd_jobs)
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True)
    listing = jobs_sub.add_parser("list", help="jobs, newest change first")
    listing.add_argument("--status", choices=["queued", "running", "done", "dead"])
    listing.add_argument("--kind")
    listing.add_argument("--tenant")
    listing.add_argument("--limit", type=int, default=50)
    stats = jobs_sub.add_parser("stats", help="depth and age of the queue by kind")
    stats.add_argument("--tenant")
    requeue = jobs_sub.add_parser("requeue", help="put dead jobs back in the queue")
    requeue.add_argument("ids", nargs="*", type=int, help="job ids")
    requeue.add_argument("--all-dead", action="store_true", help="every dead job")
    requeue.add_argument("--kind", help="with --all-dead: only this kind")
    requeue.add_argument("--tenant", help="with --all-dead: only this tenant")
    prune = jobs_sub.add_parser("prune", help="delete finished jobs now")
    prune.add_argument(
        "--older-than-days", type=float, default=None, help="default MNEMO_JOB_RETENTION_DAYS"
    )
    prune.add_argument("--dead", action="store_true", help="dead jobs too")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mnemo", description="Memory-as-a-service for LLM agents")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP API (and the worker, by default)")
    serve.add_argument("--host", default=None, help="bind address (default MNEMO_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default MNEMO_PORT, 8000)")
    serve.add_argument(
        "--workers",
        type=_positive,
        default=1,
        help="API processes sharing the port (default 1); the job worker runs in one"
        " separate process beside them (unless MNEMO_EMBEDDED_WORKER=false; with one API"
        " process, MNEMO_WORKER_PROCESS=false runs it inside that process)",
    )
    serve.set_defaults(func=cmd_serve)
    worker = sub.add_parser("worker", help="run background workers only")
    worker.add_argument("--once", action="store_true", help="drain runnable jobs, then exit")
    worker.add_argument(
        "--supervised-by",
        type=int,
        default=None,
        metavar="PID",
        help="stop (as on SIGTERM) once PID is no longer this process's parent (`mnemo"
        " serve` starts its job worker so: a killed serve leaves no worker behind)",
    )
    worker.add_argument(
        "--embedded-database",
        action="store_true",
        help="the database is the embedded one `mnemo serve` started on this host: the"
        " worker's Postgres backends run at the worker's niceness too",
    )
    worker.add_argument(
        STANDBY_FLAG,
        action="store_true",
        help="start, then wait for a line on stdin before working (`mnemo serve`'s warm"
        " spare: switched to at once when the lag guard nices its worker)",
    )
    worker.set_defaults(func=cmd_worker)
    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(func=cmd_migrate)
    reembed = sub.add_parser(
        "reembed", help="recompute memory vectors made by another embedding model"
    )
    reembed.add_argument(
        "--wait", action="store_true", help="wait for the workers to finish, with a progress bar"
    )
    reembed.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait waits")
    reembed.set_defaults(func=cmd_reembed)
    misses = sub.add_parser("misses", help="samples of what compression took away too early")
    misses_sub = misses.add_subparsers(dest="misses_command", required=True)
    export = misses_sub.add_parser("export", help="print every sample as JSON lines")
    export.add_argument("--tenant", default=None, help="only this tenant's samples")
    misses.set_defaults(func=cmd_misses)
    _add_jobs_parser(sub)
    keys = sub.add_parser("keys", help="create, revoke and list API keys")
    keys.set_defaults(func=cmd_keys)
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key and print it once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--scope", choices=["agent", "admin"], default="agent")
    create.add_argument("--label", default=None)
    create.add_argument(
        "--agent", default=None, help="bind the key to an agent name (its own sessions only)"
    )
    revoke = keys_sub.add_parser("revoke", help="revoke a key by its id (mk_<id>_…)")
    revoke.add_argument("key_id")
    keys_sub.add_parser("list", help="list keys (ids, tenants, scopes; never secrets)")
    keys_sub.add_parser(
        "generate", help="print a new key without storing it (for MNEMO_BOOTSTRAP_KEY)"
    )
    args = parser.parse_args(argv)
    settings = Settings()
    if getattr(args, "older_than_days", 0) is None:
        args.older_than_days = settings.job_retention_days
    configure_logging(settings.log_level, json_logs=settings.log_json)
    return int(args.func(settings, args))


if __name__ == "__main__":
    raise SystemExit(main())

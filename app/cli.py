"""`mnemo serve | worker | migrate`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from app.core.config import Settings


def resolve_database_url(settings: Settings) -> str:
    """The configured database, or the embedded one (started here) when none is."""
    if settings.async_database_url:
        return settings.async_database_url
    from app.db.embedded import start_embedded

    return start_embedded(settings.data_dir)


async def _migrate(url: str) -> None:
    from app.db.engine import make_engine
    from app.db.migrate import upgrade_to_head

    engine = make_engine(url, pool_size=1)
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()


def cmd_migrate(settings: Settings, _: argparse.Namespace) -> int:
    asyncio.run(_migrate(resolve_database_url(settings)))
    print("migrations applied", file=sys.stderr)
    return 0


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = settings.model_copy(
        update={k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    )
    url = resolve_database_url(settings)
    if not settings.database_url:
        # The embedded database is ours to keep current; a configured one is migrated
        # by `mnemo migrate` as a separate deployment step.
        asyncio.run(_migrate(url))
    app = create_app(settings, database_url=url)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
    )
    return 0


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from app.db.engine import make_engine
    from app.jobs.handlers import default_handlers
    from app.jobs.worker import Worker

    url = resolve_database_url(settings)

    async def run() -> None:
        engine = make_engine(url, pool_size=settings.worker_concurrency + 2)
        worker = Worker(engine=engine, handlers=default_handlers(), settings=settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if args.once:
                while await worker.run_once() is not None:
                    pass
            else:
                await worker.run(stop)
        finally:
            await engine.dispose()

    asyncio.run(run())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mnemo", description="Memory-as-a-service for LLM agents")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP API (and the worker, by default)")
    serve.add_argument("--host", default=None, help="bind address (default MNEMO_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default MNEMO_PORT, 8000)")
    serve.set_defaults(func=cmd_serve)
    worker = sub.add_parser("worker", help="run background workers only")
    worker.add_argument("--once", action="store_true", help="drain runnable jobs, then exit")
    worker.set_defaults(func=cmd_worker)
    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(func=cmd_migrate)
    args = parser.parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    return int(args.func(settings, args))


if __name__ == "__main__":
    raise SystemExit(main())

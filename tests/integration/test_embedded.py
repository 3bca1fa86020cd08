"""The throwaway embedded Postgres the tests and benchmarks run: ended and removed on exit."""

from __future__ import annotations

from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from app.stores.embedded import start_embedded, stop_embedded, throwaway_data_dir


def _running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a parent that is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _postmaster(data_dir: Path) -> int:
    return int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])


async def test_a_throwaway_server_is_stopped_and_its_folder_removed() -> None:
    with throwaway_data_dir("mnemo-test-throwaway-") as data_dir:
        url = start_embedded(data_dir)
        pid = _postmaster(data_dir)
        assert _running(pid)
        u = make_url(url)
        conn = await asyncpg.connect(host=u.query["host"], user=u.username, database=u.database)
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()
    assert not data_dir.exists()
    assert not _running(pid)


def test_stopping_where_nothing_runs_is_a_no_op(tmp_path: Path) -> None:
    stop_embedded(tmp_path)
    stop_embedded(tmp_path / "missing")
    assert list(tmp_path.iterdir()) == []

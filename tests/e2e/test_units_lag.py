"""`mnemo serve`'s lag guard and a bulk post's units job: a real server, its real job
worker child, a real queue."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from app.services.ingest import UNITS_POST_CHARS
from app.supervisor import STANDBY_FLAG
from tests.e2e.test_processes import (
    SMALL_WINDOW,
    _cmdline,
    _new_job_worker,
    _priorities,
    start_with_a_starved_worker,
)

pytestmark = pytest.mark.e2e

# The units job's limit short, the backlog's out of reach: only a units job can switch.
ENV = SMALL_WINDOW | {"MNEMO_WORKER_LAG_LIMIT_S": "3600", "MNEMO_WORKER_UNITS_LAG_LIMIT_S": "1"}


def bulk_post(exchanges: int = 30) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = []
    for i in range(exchanges):
        said = f"Exchange {i}: always keep the ledger for region {i} in euros, and write"
        messages.append({"role": "user", "content": f"{said} the weekly summary by Friday."})
        messages.append({"role": "assistant", "content": f"Noted for region {i}."})
    assert sum(len(str(m["content"])) for m in messages[::2]) > UNITS_POST_CHARS
    return messages


async def user_turns_without_units(data_dir: Path) -> int:
    conn = await asyncpg.connect(host=str(data_dir / "pg"), user="postgres", database="mnemo")
    try:
        return int(
            await conn.fetchval("SELECT count(*) FROM turns WHERE role = 'user' AND units IS NULL")
        )
    finally:
        await conn.close()


def test_a_waiting_units_job_nices_the_worker_until_it_is_done(data_dir: Path) -> None:
    """An idle-class worker that gets no CPU (SIGSTOPped) and a bulk post: its units job
    waits. Past MNEMO_WORKER_UNITS_LAG_LIMIT_S, long before the backlog's limit, serve
    tells its spare worker (started beside it, at MNEMO_WORKER_UNITS_NICE) to work, which
    stores the post's units; with no units job left, an idle-class worker again."""
    server, starved = start_with_a_starved_worker(data_dir, ENV)
    ours = os.getpriority(os.PRIO_PROCESS, 0)  # the suite may itself run niced
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = c.post("/v1/sessions/bulk/turns", json={"user_id": "u", "messages": bulk_post()})
            assert r.status_code == 201, r.text
        assert asyncio.run(user_turns_without_units(data_dir)) == 30  # left to the job
        # serve's spare, told to work: at the API's own priority (MNEMO_WORKER_UNITS_NICE)
        niced = _new_job_worker(
            server, {starved}, lambda pid: _priorities(pid) == {(os.SCHED_OTHER, ours)}
        )
        assert STANDBY_FLAG in _cmdline(niced)
        deadline = time.monotonic() + 60
        while asyncio.run(user_turns_without_units(data_dir)):
            assert time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.2)
        _new_job_worker(
            server,
            {starved, niced},
            lambda pid: _priorities(pid) == {(os.SCHED_IDLE, max(ours, 10))},
            wait_s=60,
        )
        log = server.log.read_text()
        assert "a units job has waited" in log, log
        assert log.index("restarts niced for units") < log.index("restarts idle"), log
        assert "a job has waited" not in log, log  # the backlog's limit played no part
    finally:
        server.stop()

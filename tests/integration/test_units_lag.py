"""What serve's lag guard reads of a units job (real Postgres): how long the oldest one
not done yet has been due, waiting or running; and the jobs a replaced worker that was
killed still held, handed back for it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.jobs import JobKind
from app.stores import queue
from app.supervisor import KeptAlive, LagGuard, Limits, worker_name
from tests.integration.test_claim_aging import due_since
from tests.integration.test_jobs import enqueue, job_rows, new_session

UNITS = JobKind.READ_UNITS


async def units_lag(engine: AsyncEngine) -> float | None:
    async with engine.connect() as conn:
        return await queue.oldest_unfinished_s(conn, kind=UNITS)


async def claim(engine: AsyncEngine, worker: str) -> int:
    async with engine.begin() as conn:
        job = await queue.claim(conn, worker=worker, lease_s=600)
    assert job is not None
    return job.id


async def test_the_oldest_units_job_not_done_is_waited_on_queued_or_running(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sids = [await new_session(client, engine, f"s{i}") for i in range(3)]
    assert await units_lag(engine) is None
    # Other kinds, however late (within the claim's aging bound here), are not units jobs.
    await due_since(engine, await enqueue(engine, JobKind.COMPRESS, sids[0]), 50)
    await due_since(engine, await enqueue(engine, JobKind.INDEX_SESSION, sids[1]), 45)
    assert await units_lag(engine) is None
    first = await enqueue(engine, UNITS, sids[0])
    await due_since(engine, first, 30)
    second = await enqueue(engine, UNITS, sids[1])
    await due_since(engine, second, 10)
    lag = await units_lag(engine)
    assert lag is not None and 30 <= lag < 40
    # Claimed by a worker (that may get no CPU): still not done.
    assert await claim(engine, "starved") == first  # the units jobs go first
    lag = await units_lag(engine)
    assert lag is not None and 30 <= lag < 40
    async with engine.begin() as conn:
        assert await queue.complete(conn, job_id=first, worker="starved")
    lag = await units_lag(engine)
    assert lag is not None and 10 <= lag < 20
    # One waiting out a retry's backoff is not due: not late.
    await due_since(engine, second, -60)
    assert await units_lag(engine) is None


@pytest.fixture
def ended_and_alive() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """Two processes, one that has ended and one that runs (killed after the test)."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield ended, alive
    alive.kill()
    alive.wait()


async def test_the_guard_hands_back_the_jobs_of_a_replaced_worker_that_has_ended(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    db_url: str,
    ended_and_alive: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    """A replaced idle-class worker that gets no CPU is killed before it can hand its
    jobs back: the guard hands them back under its name once it has ended, and they are
    claimable at once (not when their leases expire); a live one's are left to it."""
    sids = [await new_session(client, engine, f"s{i}") for i in range(2)]
    for sid in sids:
        await enqueue(engine, UNITS, sid)
    ended, alive = ended_and_alive
    held = await claim(engine, worker_name(ended.pid))
    kept = await claim(engine, worker_name(alive.pid))
    guard = LagGuard(KeptAlive([]), db_url, limits=Limits(60.0, 3.0), every_s=1.0)
    guard.replaced = [ended, alive]
    async with engine.connect() as conn:
        await guard._hand_back_ended(conn)
    assert guard.replaced == [alive]
    rows = {j["id"]: j for j in await job_rows(engine)}
    assert rows[held]["locked_by"] is None and rows[held]["attempts"] == 0
    assert rows[kept]["locked_by"] == worker_name(alive.pid)
    assert await claim(engine, "next") == held

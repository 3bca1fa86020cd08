"""Claim fairness: a job due longer than the aging bound goes before fresher jobs of a
higher priority, so background work does not starve behind a stream of compressions
that keeps up."""

from __future__ import annotations

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.jobs import JobKind
from app.stores import queue
from tests.integration.test_jobs import enqueue, job_rows, new_session


async def claim(engine: AsyncEngine, aging_s: float) -> int | None:
    async with engine.begin() as conn:
        job = await queue.claim(conn, worker="w", lease_s=60, aging_s=aging_s)
    return None if job is None else job.id


async def due_since(engine: AsyncEngine, job_id: int | None, seconds: float) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE jobs SET run_after = now() - make_interval(secs => :s) WHERE id = :id"),
            {"id": job_id, "s": seconds},
        )


async def test_jobs_due_past_the_bound_go_first_each_group_by_priority(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sids = [await new_session(client, engine, f"a{i}") for i in range(5)]
    fresh = await enqueue(engine, JobKind.COMPRESS, sids[0])
    young = await enqueue(engine, JobKind.INDEX_SESSION, sids[1])
    old = await enqueue(engine, JobKind.INDEX_SESSION, sids[2])
    older = await enqueue(engine, JobKind.PROMOTE, sids[3])
    old_compress = await enqueue(engine, JobKind.COMPRESS, sids[4])
    await due_since(engine, young, 20)  # within the bound: its priority decides
    await due_since(engine, old, 40)
    await due_since(engine, older, 50)
    await due_since(engine, old_compress, 35)
    order = [await claim(engine, aging_s=30) for _ in range(6)]
    # Past the bound first, whatever the kind, each group by priority then due time.
    assert order == [old_compress, older, old, fresh, young, None]


async def test_with_no_bound_passed_a_compression_goes_before_older_background_work(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    background = await enqueue(
        engine, JobKind.INDEX_SESSION, await new_session(client, engine, "a")
    )
    compression = await enqueue(engine, JobKind.COMPRESS, await new_session(client, engine, "b"))
    await due_since(engine, background, 50)
    assert [await claim(engine, aging_s=60) for _ in range(2)] == [compression, background]


async def test_under_a_stream_of_compressions_an_indexing_job_is_claimed_within_the_bound(
    engine: AsyncEngine,
) -> None:
    """Compressions keep coming (a new one before each claim, so one is always due and of
    a higher priority) and are claimed as they come; the indexing job is claimed once it
    has waited the bound, and not before. Before aging it waited for as long as the
    stream lasted."""
    aging_s = 0.5
    background = await enqueue(engine, JobKind.INDEX_SESSION, None)
    claimed: list[int | None] = []
    for _ in range(5000):  # bounded; at a claim every ~ms this is seconds past the bound
        await enqueue(engine, JobKind.COMPRESS, None)
        claimed.append(await claim(engine, aging_s=aging_s))
        if background in claimed:
            break
    assert background in claimed, f"not claimed in {len(claimed)} claims"
    assert None not in claimed
    [row] = [j for j in await job_rows(engine) if j["id"] == background]
    # It waited at least the bound (the claim's clock, not the test's).
    assert (row["updated_at"] - row["run_after"]).total_seconds() >= aging_s
    compressions = [j for j in await job_rows(engine) if j["kind"] == JobKind.COMPRESS]
    assert sum(j["status"] == "running" for j in compressions) == len(claimed) - 1


async def test_compressions_due_past_the_bound_go_before_background_work_due_longer(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """Workers that cannot keep up: compressions and background work both wait past the
    bound. The compressions go first (the next context depends on them), however long
    the background job has waited."""
    background = await enqueue(
        engine, JobKind.INDEX_SESSION, await new_session(client, engine, "a")
    )
    compression = await enqueue(engine, JobKind.COMPRESS, await new_session(client, engine, "b"))
    await due_since(engine, background, 600)
    await due_since(engine, compression, 90)
    assert [await claim(engine, aging_s=60) for _ in range(2)] == [compression, background]

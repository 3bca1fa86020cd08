"""Memory embedding jobs run in batches: the waiting jobs of one tenant's users are
claimed together and embedded by one model call and one write, with the queue's
guarantees kept (at least once, a failure retries every job of the batch, nothing lost,
no memory embedded into another's vector, tenants never mixed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.config import Settings
from app.core.jobs import JobKind
from app.providers.embed import EmbeddingUnavailable, HashEmbedder
from app.services.jobs import JobContext
from app.services.memories import add_memory
from app.services.memory_jobs import MemoryDeps, embed_memories
from app.stores import queue
from app.stores.tables import EMBEDDING_DIM
from app.worker import Worker


class Recording:
    """A deterministic embedder that records every call; it may fail its first calls
    or run a hook (another worker's doing) before answering."""

    model_id = HashEmbedder.model_id

    def __init__(self, *, fail_first: int = 0, hook: Callable[[], Any] | None = None) -> None:
        self.inner = HashEmbedder(EMBEDDING_DIM)
        self.dim = EMBEDDING_DIM
        self.calls: list[list[str]] = []
        self.fail_first = fail_first
        self.hook = hook

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await asyncio.sleep(0)  # lets a concurrent worker run between claim and write
        if self.hook is not None:
            await self.hook()
        if self.fail_first:
            self.fail_first -= 1
            raise EmbeddingUnavailable("embedding service down")
        return [self.inner.embed_one(t) for t in texts]


def embed_worker(
    engine: AsyncEngine,
    settings: Settings,
    embedder: Recording,
    name: str = "w1",
    batch: int | None = None,
) -> Worker:
    declared = embed_memories if batch is None else replace(embed_memories, batch=batch)
    handler = declared.bind(MemoryDeps(settings=settings, embedder=embedder))
    return Worker(
        engine=engine, handlers={JobKind.EMBED_MEMORIES: handler}, settings=settings, name=name
    )


async def remember(
    engine: AsyncEngine, tenant: str, user: str, text_: str, settings: Settings
) -> None:
    async with engine.begin() as conn:
        await add_memory(
            conn,
            tenant=tenant,
            user=user,
            text=text_,
            kind="preference",
            pinned=False,
            ttl_days=None,
            metadata={},
            source={"api": True},
            max_attempts=settings.job_max_attempts,
        )


async def jobs(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            (
                await conn.execute(
                    text(
                        "SELECT id, tenant_id, status, attempts, locked_by, last_error FROM jobs"
                        " WHERE kind = 'embed_memories' ORDER BY id"
                    )
                )
            ).all()
        )


async def vectors(engine: AsyncEngine) -> dict[str, tuple[list[float] | None, bool]]:
    """Each memory's text: its vector, and whether its half-precision copy exists."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT m.text, m.embedding, v.memory_id IS NOT NULL AS copied"
                    " FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id"
                )
            )
        ).all()
    return {r.text: (r.embedding, r.copied) for r in rows}


def assert_each_has_its_own_vector(
    found: dict[str, tuple[list[float] | None, bool]], embedder: Recording
) -> None:
    for text_, (vector, copied) in found.items():
        assert vector is not None and copied, text_
        assert vector == pytest.approx(embedder.inner.embed_one(text_), abs=1e-6), text_


async def test_the_waiting_jobs_of_many_users_run_as_one_batch(
    engine: AsyncEngine, settings: Settings
) -> None:
    for i in range(5):
        await remember(engine, "default", f"u{i}", f"user {i} prefers window seats", settings)
    await remember(engine, "default", "u0", "user 0 also collects stamps", settings)
    assert len(await jobs(engine)) == 5  # one waiting job per user
    embedder = Recording()
    worker = embed_worker(engine, settings, embedder)

    assert await worker.run_once() is not None
    assert await worker.run_once() is None  # nothing left: the first run took all five

    assert [len(c) for c in embedder.calls] == [6]  # one model call for six memories
    assert {j.status for j in await jobs(engine)} == {"done"}
    assert_each_has_its_own_vector(await vectors(engine), embedder)


async def test_a_batch_never_mixes_tenants(engine: AsyncEngine, settings: Settings) -> None:
    for tenant in ("acme", "globex"):
        for i in range(2):
            await remember(engine, tenant, f"u{i}", f"{tenant} user {i} likes tea", settings)
    embedder = Recording()
    worker = embed_worker(engine, settings, embedder)

    await worker.run_once()
    by_tenant = {j.tenant_id: set() for j in await jobs(engine)}
    for j in await jobs(engine):
        by_tenant[j.tenant_id].add(j.status)
    first = embedder.calls[0]
    tenant = first[0].split()[0]
    assert all(t.startswith(tenant) for t in first) and len(first) == 2
    other = "globex" if tenant == "acme" else "acme"
    assert by_tenant == {tenant: {"done"}, other: {"queued"}}

    await worker.run_once()
    assert {j.status for j in await jobs(engine)} == {"done"}
    assert_each_has_its_own_vector(await vectors(engine), embedder)


async def test_a_failed_batch_is_retried_whole_and_nothing_is_lost(
    engine: AsyncEngine, settings: Settings
) -> None:
    for i in range(4):
        await remember(engine, "default", f"u{i}", f"user {i} drinks green tea", settings)
    embedder = Recording(fail_first=1)
    await embed_worker(engine, settings, embedder).run_once()
    failed = await jobs(engine)
    assert [(j.status, j.attempts) for j in failed] == [("queued", 1)] * 4
    assert all("embedding service down" in (j.last_error or "") for j in failed)
    assert all(v is None for v, _ in (await vectors(engine)).values())  # nothing half-written

    async with engine.begin() as conn:  # skip the backoff
        await conn.execute(text("UPDATE jobs SET run_after = now()"))
    await embed_worker(engine, settings, embedder).drain(asyncio.Event())
    assert [(j.status, j.attempts) for j in await jobs(engine)] == [("done", 2)] * 4
    assert_each_has_its_own_vector(await vectors(engine), embedder)


async def test_a_lease_lost_on_one_job_rolls_the_batch_back_and_frees_the_others(
    engine: AsyncEngine, settings: Settings
) -> None:
    for i in range(3):
        await remember(engine, "default", f"u{i}", f"user {i} plays chess", settings)
    ids = [j.id for j in await jobs(engine)]

    async def steal_the_second() -> None:  # its lease expired and another worker took it
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE jobs SET locked_by = 'thief' WHERE id = :id"), {"id": ids[1]}
            )

    embedder = Recording(hook=steal_the_second)
    await embed_worker(engine, settings, embedder).run_once()

    after = {j.id: (j.status, j.locked_by) for j in await jobs(engine)}
    assert after[ids[1]] == ("running", "thief")  # the thief's to finish
    assert after[ids[0]] == ("queued", None) and after[ids[2]] == ("queued", None)
    assert all(v is None for v, _ in (await vectors(engine)).values())  # rolled back


async def test_concurrent_workers_embed_every_memory_once_with_its_own_vector(
    engine: AsyncEngine, settings: Settings
) -> None:
    texts = [f"user {i} memory {k} about topic {i * 7 + k}" for i in range(30) for k in range(2)]
    for t in texts:
        await remember(engine, "default", f"u{t.split()[1]}", t, settings)
    embedders = [Recording(), Recording()]
    workers = [
        embed_worker(engine, settings, e, name=f"w{n}", batch=4) for n, e in enumerate(embedders)
    ]
    stop = asyncio.Event()

    ran = await asyncio.gather(*(w.drain(stop) for w in workers))

    assert all(ran) and sum(ran) >= 30 // 4  # both took part, in batches of at most 4 jobs
    assert {j.status for j in await jobs(engine)} == {"done"}
    embedded = [t for e in embedders for call in e.calls for t in call]
    assert sorted(embedded) == sorted(texts)  # each memory embedded once, none lost
    assert_each_has_its_own_vector(await vectors(engine), embedders[0])


async def test_a_wake_up_for_an_embedding_job_waits_for_the_batch_to_gather(
    engine: AsyncEngine, settings: Settings
) -> None:
    """NOTIFY of a batched kind wakes the worker after ``job_batch_wait_s``; of any
    other kind at once."""
    batched = embed_worker(
        engine, settings.model_copy(update={"job_batch_wait_s": 0.05}), Recording()
    )

    async def compress(ctx: JobContext) -> None:
        return None

    worker = Worker(
        engine=engine,
        handlers={**batched.handlers, JobKind.COMPRESS: compress},
        settings=batched.settings,
    )
    wake = asyncio.Event()
    on_notify = worker._on_notify(wake)

    on_notify(None, 0, queue.CHANNEL, JobKind.EMBED_MEMORIES)
    on_notify(None, 0, queue.CHANNEL, JobKind.EMBED_MEMORIES)  # one wake-up for the burst
    assert not wake.is_set()
    await asyncio.wait_for(wake.wait(), timeout=30)

    wake.clear()
    on_notify(None, 0, queue.CHANNEL, JobKind.COMPRESS)
    assert wake.is_set()

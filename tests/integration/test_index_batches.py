"""Session indexing jobs run in batches: the waiting index jobs of one tenant's sessions
are claimed together and embedded by one model call; each session's rows are written
by one statement, in a transaction of its own with its job. The queue's guarantees are
kept: at least once, each job applied once, a failing job fails alone, a lost lease
loses nothing and frees the rest of the batch, tenants never mixed."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.config import Settings
from app.core.jobs import JobKind
from app.core.turns import PreparedTurn
from app.providers.embed import EmbeddingBadResponse, HashEmbedder
from app.services.ingest import ingest_turns
from app.services.memory_jobs import MemoryDeps, index_session
from app.stores.tables import EMBEDDING_DIM
from app.worker import Worker

TOPICS = ("train tickets to the coast", "a quiet hotel room", "the quarterly budget")


class Recording:
    """A deterministic embedder that records every call; it refuses any call holding a
    text with ``refuse`` in it, and may run a hook (another worker's doing) first."""

    model_id = HashEmbedder.model_id

    def __init__(self, *, refuse: str | None = None, hook: Callable[[], Any] | None = None):
        self.inner = HashEmbedder(EMBEDDING_DIM)
        self.dim = EMBEDDING_DIM
        self.calls: list[list[str]] = []
        self.refuse = refuse
        self.hook = hook

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await asyncio.sleep(0)  # lets a concurrent worker run between claim and write
        if self.hook is not None:
            await self.hook()
        if self.refuse is not None and any(self.refuse in t for t in texts):
            raise EmbeddingBadResponse(f"cannot embed {self.refuse!r}")
        return [self.inner.embed_one(t) for t in texts]


def index_worker(
    engine: AsyncEngine,
    settings: Settings,
    embedder: Recording,
    name: str = "w1",
    batch: int | None = None,
) -> Worker:
    declared = index_session if batch is None else replace(index_session, batch=batch)
    handler = declared.bind(MemoryDeps(settings=settings, embedder=embedder))
    return Worker(
        engine=engine, handlers={JobKind.INDEX_SESSION: handler}, settings=settings, name=name
    )


def _turn(n: int, role: str, content: str) -> PreparedTurn:
    return PreparedTurn(
        client_id=f"m-{n}",
        role=role,
        content=content,
        tool_calls=None,
        tool_call_id=None,
        name=None,
        tokens=len(content.split()),
        emphasized=False,
        metadata={},
        created_at=None,
    )


async def _no_trigger(conn: object, counters: object, new: object) -> None:
    return None


async def talk(
    engine: AsyncEngine, session: str, *, tenant: str = "default", user: str = "u-1", n: int = 6
) -> None:
    """A session of ``n`` exchanges (user, assistant) about a few topics: its index job."""
    turns = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        turns.append(_turn(2 * i + 1, "user", f"In {session}, question {i}: what about {topic}?"))
        turns.append(_turn(2 * i + 2, "assistant", f"In {session}, answer {i} on {topic}."))
    async with engine.begin() as conn:
        await ingest_turns(
            conn,
            tenant=tenant,
            session=session,
            user=user,
            turns=turns,
            policy=_no_trigger,
            job_max_attempts=3,
        )


async def jobs(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            (
                await conn.execute(
                    text(
                        "SELECT j.id, j.tenant_id, s.external_id AS session, j.status,"
                        " j.attempts, j.locked_by, j.last_error FROM jobs j"
                        " JOIN sessions s ON s.id = j.session_id"
                        " WHERE j.kind = 'index_session' ORDER BY j.id"
                    )
                )
            ).all()
        )


async def indexed(engine: AsyncEngine) -> dict[str, list[Any]]:
    """Each session's index rows: text, vector, copy, postings, turn seq."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text("""
                    SELECT s.external_id AS session, m.text, m.embedding, m.turn_seq,
                           m.tenant_id, m.user_id = s.user_id AS users_match,
                           v.memory_id IS NOT NULL AS copied,
                           (SELECT count(*) FROM memory_terms t WHERE t.memory_id = m.id)
                               AS postings
                    FROM memories m JOIN sessions s ON s.id = m.session_id
                    LEFT JOIN memory_vectors v ON v.memory_id = m.id
                    ORDER BY m.id
                """)
            )
        ).all()
    found: dict[str, list[Any]] = {}
    for r in rows:
        found.setdefault(r.session, []).append(r)
    return found


async def marks(engine: AsyncEngine) -> dict[str, tuple[int, int | None, bool]]:
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT external_id, episode_seq, last_user_seq,"
                    " last_user_embedding IS NOT NULL AS embedded FROM sessions"
                )
            )
        ).all()
    return {r.external_id: (r.episode_seq, r.last_user_seq, r.embedded) for r in rows}


def assert_indexed_once_with_own_vectors(
    found: dict[str, list[Any]], sessions: Sequence[str], embedder: Recording
) -> None:
    assert sorted(found) == sorted(sessions)
    for session, rows in found.items():
        texts = [r.text for r in rows]
        assert len(texts) == len(set(texts)), session  # nothing written twice
        assert any(r.turn_seq is not None for r in rows)  # single turns
        assert any(r.turn_seq is None for r in rows)  # and episodes
        for r in rows:
            assert session in r.text  # its own session's words, nobody else's
            assert r.users_match and r.copied and r.postings > 0, (session, r.text)
            assert r.embedding == pytest.approx(embedder.inner.embed_one(r.text), abs=1e-6)


async def test_the_waiting_index_jobs_of_many_sessions_run_as_one_batch(
    engine: AsyncEngine, settings: Settings
) -> None:
    names = [f"s{i}" for i in range(4)]
    for i, name in enumerate(names):
        await talk(engine, name, user=f"u{i % 2}")
    assert len(await jobs(engine)) == 4
    embedder = Recording()
    worker = index_worker(engine, settings, embedder)
    writes: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "INSERT INTO memories" in statement:
            writes.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    try:
        assert await worker.run_once() is not None
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", seen)
    assert await worker.run_once() is None  # the first run took all four

    assert len(embedder.calls) == 1 and all(  # one model call for the four sessions
        any(name in t for t in embedder.calls[0]) for name in names
    )
    assert len(writes) == len(names)  # one statement wrote each session's rows
    assert {j.status for j in await jobs(engine)} == {"done"}
    assert_indexed_once_with_own_vectors(await indexed(engine), names, embedder)
    for name, (episode_seq, last_user_seq, embedded) in (await marks(engine)).items():
        assert episode_seq > 0 and last_user_seq == 11 and embedded, name


async def test_an_index_batch_never_mixes_tenants(engine: AsyncEngine, settings: Settings) -> None:
    for tenant in ("acme", "globex"):
        for i in range(2):
            await talk(engine, f"{tenant}-s{i}", tenant=tenant)
    embedder = Recording()
    worker = index_worker(engine, settings, embedder)

    await worker.run_once()
    [tenant] = {m for t in embedder.calls[0] for m in re.findall(r"In (acme|globex)-s", t)}
    by_tenant: dict[str, set[str]] = {}
    for j in await jobs(engine):
        by_tenant.setdefault(j.tenant_id, set()).add(j.status)
    other = "globex" if tenant == "acme" else "acme"
    assert by_tenant == {tenant: {"done"}, other: {"queued"}}

    await worker.run_once()
    found = await indexed(engine)
    assert {
        r.tenant_id for name, rows in found.items() for r in rows if name.startswith(other)
    } == {other}
    assert_indexed_once_with_own_vectors(found, sorted(found), embedder)


async def test_a_failing_job_fails_alone_and_the_rest_of_its_batch_is_indexed(
    engine: AsyncEngine, settings: Settings
) -> None:
    names = ["s0", "s1", "poison", "s3"]
    for name in names:
        await talk(engine, name)
    embedder = Recording(refuse="poison")
    # A backoff longer than the drain: with the suite's 0.05 s, a loaded machine let the
    # poison job fall due again before the drain ended and fail a third time.
    settings = settings.model_copy(update={"job_backoff_base_s": 600.0})
    worker = index_worker(engine, settings, embedder)

    await worker.run_once()  # the batch fails as a whole: nothing half-written
    assert [(j.status, j.attempts) for j in await jobs(engine)] == [("queued", 1)] * 4
    assert await indexed(engine) == {}

    async with engine.begin() as conn:  # skip the backoff
        await conn.execute(text("UPDATE jobs SET run_after = now()"))
    await worker.drain(asyncio.Event())  # each job claimed before now runs alone

    after = {j.session: (j.status, j.attempts) for j in await jobs(engine)}
    assert after.pop("poison") == ("queued", 2)  # it failed again, alone
    assert after == {name: ("done", 2) for name in ("s0", "s1", "s3")}
    assert_indexed_once_with_own_vectors(await indexed(engine), ["s0", "s1", "s3"], embedder)
    assert [len(c) > 0 for c in embedder.calls[1:]] == [True] * 4  # one call per job


async def test_a_lease_lost_on_one_index_job_writes_nothing_of_it_and_frees_the_rest(
    engine: AsyncEngine, settings: Settings
) -> None:
    for i in range(3):
        await talk(engine, f"s{i}")
    ids = [j.id for j in await jobs(engine)]

    async def steal_the_second() -> None:  # its lease expired and another worker took it
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE jobs SET locked_by = 'thief' WHERE id = :id"), {"id": ids[1]}
            )

    embedder = Recording(hook=steal_the_second)
    await index_worker(engine, settings, embedder).run_once()

    after = {j.id: (j.status, j.locked_by) for j in await jobs(engine)}
    assert after[ids[0]] == ("done", "w1")  # committed with its own rows before
    assert after[ids[1]] == ("running", "thief")  # the thief's to finish
    assert after[ids[2]] == ("queued", None)  # back to the queue at once
    assert_indexed_once_with_own_vectors(await indexed(engine), ["s0"], embedder)
    assert {k: v[0] > 0 for k, v in (await marks(engine)).items()} == {
        "s0": True,
        "s1": False,  # nothing of the lost job was written
        "s2": False,
    }


async def test_concurrent_workers_index_every_session_once(
    engine: AsyncEngine, settings: Settings
) -> None:
    names = [f"s{i}" for i in range(12)]
    for i, name in enumerate(names):
        await talk(engine, name, user=f"u{i % 3}")
    embedders = [Recording(), Recording()]
    workers = [
        index_worker(engine, settings, e, name=f"w{n}", batch=4) for n, e in enumerate(embedders)
    ]

    ran = await asyncio.gather(*(w.drain(asyncio.Event()) for w in workers))

    assert all(ran) and sum(ran) < len(names)  # both took part, in batches
    assert {j.status for j in await jobs(engine)} == {"done"}
    assert_indexed_once_with_own_vectors(await indexed(engine), names, embedders[0])

"""A bulk post's units (what each of its user turns states) are stored by a job of their
own, claimed before every other kind, not only when the index job gets to the turns;
a conversation's post still stores them at ingest. The job is idempotent beside the
index job, a compression and a delete: whoever stores a turn's record first stores
the one the others would have. Against real Postgres."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.extract.rules import RuleExtractor
from app.compression.live_notes import units_record
from app.core.config import Settings
from app.core.jobs import JobKind
from app.core.turns import PreparedTurn
from app.providers.embed import HashEmbedder
from app.services import read_units as units_job
from app.services.compression import CompressionDeps, compress
from app.services.ingest import UNITS_POST_CHARS, ingest_turns
from app.services.memory_jobs import MemoryDeps, index_session
from app.services.read_units import read_units
from app.stores import queue
from app.stores.tables import EMBEDDING_DIM
from app.worker import Worker
from tests.integration.test_index_batches import _no_trigger, _turn

RULE = "Never restart the primary during the migration."


def bulk(first: int = 1, exchanges: int = 30) -> list[PreparedTurn]:
    """A bulk post: ``exchanges`` user turns (one of them a rule) with their answers."""
    turns = []
    for i in range(exchanges):
        said = (
            RULE
            if i == 3
            else f"Point {first + i}: we should look at the replica lag again before the weekend."
        )
        turns.append(_turn(first + 2 * i, "user", said))
        turns.append(_turn(first + 2 * i + 1, "assistant", f"Noted, point {first + i}."))
    assert sum(len(t.content or "") for t in turns if t.role == "user") > UNITS_POST_CHARS
    return turns


async def post(engine: AsyncEngine, turns: Sequence[PreparedTurn], session: str = "s") -> None:
    async with engine.begin() as conn:
        await ingest_turns(
            conn,
            tenant="default",
            session=session,
            user="u-1",
            turns=turns,
            policy=_no_trigger,
            job_max_attempts=3,
        )


async def stored(engine: AsyncEngine) -> dict[str, Any]:
    """Each turn's stored record (None: none), by message id."""
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT external_id, units FROM turns"))
        return {r.external_id: r.units for r in rows}


async def jobs(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT kind, status FROM jobs ORDER BY id"))
        return {r.kind: r.status for r in rows}


def expected(turns: Sequence[PreparedTurn]) -> dict[str, Any]:
    """The records the rules make: a user turn's from its text, none for the others."""
    return {
        f"{t.client_id}": json.loads(units_record(t.content or "")) if t.role == "user" else None
        for t in turns
    }


def units_worker(engine: AsyncEngine, settings: Settings) -> Worker:
    """A worker that runs the units job alone (any other kind it claims is buried)."""
    return Worker(
        engine=engine, handlers={JobKind.READ_UNITS: read_units.bind(None)}, settings=settings
    )


def index_worker(engine: AsyncEngine, settings: Settings) -> Worker:
    deps = MemoryDeps(settings=settings, embedder=HashEmbedder(EMBEDDING_DIM))
    return Worker(
        engine=engine, handlers={JobKind.INDEX_SESSION: index_session.bind(deps)}, settings=settings
    )


async def enqueue(engine: AsyncEngine, kind: JobKind, **payload: Any) -> None:
    """A job of ``kind`` for the one session there is."""
    async with engine.begin() as conn:
        sid = await conn.scalar(text("SELECT id FROM sessions"))
        await queue.enqueue(
            conn,
            tenant_id="default",
            session_id=sid,
            kind=kind,
            payload=payload or None,
            max_attempts=3,
        )


def compress_worker(engine: AsyncEngine, settings: Settings) -> Worker:
    """A worker that runs compressions alone, with the rule extractor."""
    deps = CompressionDeps(settings=settings, fallback=RuleExtractor())
    return Worker(engine=engine, handlers={compress.kind: compress.bind(deps)}, settings=settings)


async def test_a_bulk_posts_units_are_stored_by_a_job_claimed_first(
    engine: AsyncEngine, settings: Settings
) -> None:
    turns = bulk()
    await post(engine, turns)
    assert all(record is None for record in (await stored(engine)).values())  # not at ingest
    assert await jobs(engine) == {"index_session": "queued", "read_units": "queued"}

    claimed = await units_worker(engine, settings).run_once()
    assert claimed is not None and claimed.kind == JobKind.READ_UNITS  # before the index job
    assert await stored(engine) == expected(turns)
    assert [u["text"] for u in (await stored(engine))["m-7"]["units"]] == [RULE]
    assert await jobs(engine) == {"index_session": "queued", "read_units": "done"}

    # The index job finds every user turn read, and leaves each record as it is.
    assert await index_worker(engine, settings).run_once() is not None
    assert await stored(engine) == expected(turns)
    assert await jobs(engine) == {"index_session": "done", "read_units": "done"}


async def test_a_conversations_post_is_read_at_ingest_and_queues_no_units_job(
    engine: AsyncEngine,
) -> None:
    turns = [_turn(1, "user", RULE), _turn(2, "assistant", "Understood.")]
    await post(engine, turns)
    assert await stored(engine) == expected(turns)
    assert await jobs(engine) == {"index_session": "queued"}


async def test_a_second_bulk_post_while_the_job_waits_is_read_by_it(
    engine: AsyncEngine, settings: Settings
) -> None:
    first, second = bulk(1), bulk(61)
    await post(engine, first)
    await post(engine, second)
    async with engine.connect() as conn:
        waiting = await conn.scalar(text("SELECT count(*) FROM jobs WHERE kind = 'read_units'"))
    assert waiting == 1  # one waiting job per session
    assert await units_worker(engine, settings).run_once() is not None
    assert await stored(engine) == expected([*first, *second])


async def _race(
    engine: AsyncEngine,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    meanwhile: Callable[[], Awaitable[Any]],
) -> None:
    """Run the units job with ``meanwhile`` run between its read of the turns and its write."""
    between_read_and_write(monkeypatch, units_job, meanwhile)
    assert await units_worker(engine, settings).run_once() is not None


def between_read_and_write(
    monkeypatch: pytest.MonkeyPatch, handler: ModuleType, meanwhile: Callable[[], Awaitable[Any]]
) -> None:
    """``meanwhile`` run by the jobs of ``handler`` (a module reading turns with
    ``read_units.records_of``) once they have read the turns, before they write."""
    read = units_job.records_of

    async def then_meanwhile(unread: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
        records = await read(unread)
        await meanwhile()
        return records

    monkeypatch.setattr(handler, "records_of", then_meanwhile)


async def test_the_index_job_storing_them_meanwhile_changes_nothing(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = bulk()
    await post(engine, turns)

    async def index() -> None:
        assert await index_worker(engine, settings).run_once() is not None
        assert await stored(engine) == expected(turns)  # the index job stored them first

    await _race(engine, settings, monkeypatch, index)
    assert await stored(engine) == expected(turns)
    assert await jobs(engine) == {"index_session": "done", "read_units": "done"}


async def test_a_compression_meanwhile_changes_nothing(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = bulk()
    await post(engine, turns)
    compressor = compress_worker(engine, settings)

    async def compaction() -> None:
        await enqueue(engine, JobKind.COMPRESS, trigger="manual")
        assert await compressor.run_once() is not None

    await _race(engine, settings, monkeypatch, compaction)
    async with engine.connect() as conn:
        compacted = await conn.scalar(text("SELECT count(*) FROM turns WHERE compacted"))
    assert compacted  # the compression took some turns while the job ran
    # Every user turn has the record the rules make from it, whoever stored it.
    assert await stored(engine) == expected(turns)
    assert await jobs(engine) == {
        "index_session": "queued",
        "compress": "done",
        "promote": "queued",
        "read_units": "done",
    }


async def test_a_session_deleted_meanwhile_is_not_written(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await post(engine, bulk())

    async def delete() -> None:
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM sessions"))

    await _race(engine, settings, monkeypatch, delete)
    assert await stored(engine) == {}
    assert await jobs(engine) == {}  # its job went with it; nothing was left behind

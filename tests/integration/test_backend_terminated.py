"""Backends terminated under the API and the worker (``pg_terminate_backend``: SQLSTATE
57P01, what an operator, a failover or a fast shutdown does): no 500; a read answers
as if nothing happened; a write gets a 503 with Retry-After and stores nothing, or
stores once; a job is run again and applied once; the pool hands out no dead
connection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.wiring import build_embedder_from_settings, build_worker
from tests.conftest import make_settings, post_turns

T = TypeVar("T")

# The backends of the engine under test (``make_engine``'s application_name), except
# the caller's: all of them, or those waiting on a lock.
BACKENDS = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND application_name = 'mnemo' AND (NOT $1 OR wait_event_type = 'Lock')
"""
# Waits (up to 5 s) until each backend has exited.
TERMINATE = """
    SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM unnest($1::int[]) pid
"""
# Every table a read or a write below touches first.
LOCKED = "LOCK TABLE users, sessions, memories IN ACCESS EXCLUSIVE MODE"


def _dsn(db_url: str) -> str:
    return db_url.replace("postgresql+asyncpg://", "postgresql://")


async def terminate_all(db_url: str) -> int:
    """Terminate every backend of the engine under test (its pool's idle connections)."""
    admin = await asyncpg.connect(_dsn(db_url))
    try:
        pids = [r["pid"] for r in await admin.fetch(BACKENDS, False)]
        return int(await admin.fetchval(TERMINATE, pids))
    finally:
        await admin.close()


async def terminated_mid_statement(db_url: str, call: Awaitable[T]) -> T:
    """Run ``call`` while its tables are locked; terminate the backend that waits on the
    lock (mid-statement: the statement was sent, its answer never comes), release the
    lock, and return what ``call`` returns."""
    admin = await asyncpg.connect(_dsn(db_url))
    try:
        async with admin.transaction():
            await admin.execute(LOCKED)
            task = asyncio.ensure_future(call)
            waiting: list[int] = []
            for _ in range(500):
                # A transaction sees pg_stat_activity as at its first look unless told.
                await admin.execute("SELECT pg_stat_clear_snapshot()")
                waiting = [r["pid"] for r in await admin.fetch(BACKENDS, True)]
                if waiting or task.done():
                    break
                await asyncio.sleep(0.01)
            assert waiting, "the call never waited on the lock"
            assert await admin.fetchval(TERMINATE, waiting) == len(waiting)
        return await task
    finally:
        await admin.close()


async def scalar(engine: AsyncEngine, sql: str) -> object:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql))).scalar()


@pytest.fixture
async def seeded(client: httpx.AsyncClient) -> dict[str, httpx.Response]:
    """A session with a turn, a user with a memory, and what the reads answer now."""
    r = await post_turns(client, "s", [{"role": "user", "content": "I live in Oslo", "id": "m1"}])
    assert r.status_code == 201
    r = await client.post("/v1/users/u-1/memories", json={"text": "likes green tea"})
    assert r.status_code == 201
    return {name: await client.get(path, params=params) for name, (path, params) in READS.items()}


READS: dict[str, tuple[str, dict[str, str]]] = {
    "context": ("/v1/sessions/s/context", {}),  # the driver checkout
    "context with memories": ("/v1/sessions/s/context", {"query": "tea"}),  # and SQLAlchemy
    "search": ("/v1/users/u-1/memories", {"query": "green tea"}),  # the driver checkout
    "state": ("/v1/sessions/s/state", {}),  # SQLAlchemy
}


@pytest.mark.parametrize("read", READS)
async def test_a_read_after_the_pools_backends_are_terminated_answers_as_before(
    client: httpx.AsyncClient, db_url: str, seeded: dict[str, httpx.Response], read: str
) -> None:
    assert await terminate_all(db_url) >= 1
    path, params = READS[read]
    r = await client.get(path, params=params)
    assert r.status_code == 200, r.text
    assert r.content == seeded[read].content


@pytest.mark.parametrize("read", READS)
async def test_a_read_whose_backend_is_terminated_mid_statement_runs_again(
    client: httpx.AsyncClient, db_url: str, seeded: dict[str, httpx.Response], read: str
) -> None:
    path, params = READS[read]
    r = await terminated_mid_statement(db_url, client.get(path, params=params))
    assert r.status_code == 200, r.text
    assert r.content == seeded[read].content
    # The pool's other connections are alive or replaced: the next reads are answered.
    for name, (other, others) in READS.items():
        assert (await client.get(other, params=others)).content == seeded[name].content


async def test_writes_after_the_pools_backends_are_terminated_are_stored_once(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str, seeded: object
) -> None:
    assert await terminate_all(db_url) >= 1
    r = await post_turns(client, "s", [{"role": "user", "content": "I moved", "id": "m2"}])
    assert r.status_code == 201, r.text
    assert await terminate_all(db_url) >= 1
    r = await client.post("/v1/users/u-1/memories", json={"text": "likes black coffee"})
    assert r.status_code == 201, r.text
    assert await scalar(engine, "SELECT count(*) FROM turns") == 2
    assert await scalar(engine, "SELECT count(*) FROM memories WHERE source ? 'api'") == 2


async def test_a_write_whose_backend_is_terminated_mid_statement_is_a_503_and_stores_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str, seeded: object
) -> None:
    message = {"role": "user", "content": "I moved to Bergen", "id": "m2"}
    memory = {"text": "likes black coffee"}
    for write in (
        post_turns(client, "s", [message]),
        client.post("/v1/users/u-1/memories", json=memory),
    ):
        r = await terminated_mid_statement(db_url, write)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "2"
        assert r.headers["content-type"].startswith("application/problem+json")
    assert await scalar(engine, "SELECT count(*) FROM turns") == 1
    assert await scalar(engine, "SELECT count(*) FROM memories WHERE source ? 'api'") == 1
    # Sent again, as the 503 asks: stored once.
    for _ in range(2):
        assert (await post_turns(client, "s", [message])).status_code == 201
        assert (await client.post("/v1/users/u-1/memories", json=memory)).status_code == 201
    assert await scalar(engine, "SELECT count(*) FROM turns") == 2
    assert await scalar(engine, "SELECT count(*) FROM memories WHERE source ? 'api'") == 2


DRAIN_WITHIN_S = 60.0


async def drain(engine: AsyncEngine, db_url: str, *, terminated: bool) -> None:
    """Run every job; with ``terminated``, the first one's backend is terminated while
    its statement waits on a lock. A failed attempt puts its job back in backoff (due a
    moment later): no job claimable is not yet no job left, so this waits for that."""
    async with httpx.AsyncClient() as http:
        settings = make_settings(db_url)
        embedder = build_embedder_from_settings(settings, http)
        worker = build_worker(settings, engine, http=http, embedder=embedder)
        if terminated:
            await terminated_mid_statement(db_url, worker.run_once())
        deadline = asyncio.get_running_loop().time() + DRAIN_WITHIN_S
        while asyncio.get_running_loop().time() < deadline:
            if await worker.run_once() is not None:
                continue
            left = "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
            if not await scalar(engine, left):
                return
            await asyncio.sleep(0.02)


async def test_a_job_whose_backend_is_terminated_is_run_again_and_applied_once(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Step {i}: buy oat milk {i}."}
        for i in range(8)
    ]
    await post_turns(client, "clean", turns, user="u-clean")
    await drain(engine, db_url, terminated=False)
    clean = await scalar(engine, "SELECT count(*) FROM memories")
    assert clean, "indexing wrote no memory: nothing to compare"

    await post_turns(client, "cut", turns, user="u-cut")
    await drain(engine, db_url, terminated=True)
    assert await scalar(engine, "SELECT count(*) FROM jobs WHERE status <> 'done'") == 0
    assert await scalar(engine, "SELECT max(attempts) FROM jobs") == 2  # the one cut short
    assert await scalar(engine, "SELECT count(*) FROM memories") == 2 * clean  # not lost, once

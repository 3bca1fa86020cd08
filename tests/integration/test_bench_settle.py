"""The retrieval benchmarks settle their database before measuring: VACUUM, and
ANALYZE only the tables changed since their last ANALYZE, so that a rerun on a kept
database plans with the statistics of the run before (ANALYZE samples large tables
at random: analysing again would give each run its own)."""

from __future__ import annotations

import random

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.datasets.runner import settle
from tests.conftest import _dsn
from tests.integration.test_memory_vectors import add_notes

LAST_ANALYZE = """
    SELECT relname, coalesce(last_analyze, last_autoanalyze) AS at FROM pg_stat_user_tables
"""


async def _flush(engine: AsyncEngine) -> None:
    """Make this process's writes visible in pg_stat_user_tables now (a backend
    reports its table counters when it goes idle, at most once a second)."""
    async with engine.begin() as conn:
        await conn.execute(text("SELECT pg_stat_force_next_flush()"))


async def test_settle_analyses_what_changed_and_nothing_twice(
    engine: AsyncEngine, db_url: str
) -> None:
    await add_notes(engine, "u-settle", 10, random.Random(5))
    await _flush(engine)
    conn = await asyncpg.connect(_dsn(db_url, make_url(db_url).database or ""))
    try:
        first = await settle(conn)
        assert "public.memories" in first
        assert "public.sessions" in first  # never analysed in this database yet
        before = {r["relname"]: r["at"] for r in await conn.fetch(LAST_ANALYZE)}
        assert before["memories"] is not None

        # Nothing changed: no table is analysed again, so none gets new statistics.
        assert await settle(conn) == []
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        assert {r["relname"]: r["at"] for r in await conn.fetch(LAST_ANALYZE)} == before

        # New memories: their table is analysed again, an untouched one is not.
        await add_notes(engine, "u-settle", 5, random.Random(6))
        await _flush(engine)
        again = await settle(conn)
        assert "public.memories" in again
        assert "public.sessions" not in again
    finally:
        await conn.close()

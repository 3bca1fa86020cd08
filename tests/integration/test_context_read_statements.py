"""The context read is one statement, also for a session with more live turns than its
first page holds: the live user turns older than the page (a change the state does not
show yet may be there) come in that statement, against real Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.services.context import FIRST_PAGE
from tests.integration.test_change_notice import with_worker
from tests.integration.test_context_live_changes import _compacted_then, _msg, _state_of

# A long turn: the first page of live turns alone fills a small budget.
LONG = "The shard map lists every host with its zone, its disks and its replicas. " * 12


@pytest.fixture
async def unindexed(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its worker, whose index jobs wait an hour, and a model window no
    history here fills (no compression but the one asked for)."""
    async for c in with_worker(db_url, engine, index_delay_s=3600, model_window_tokens=400_000):
        yield c


async def _settled(engine: AsyncEngine, timeout_s: float = 60) -> None:
    """Wait until the worker runs nothing (the index jobs wait their hour)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        async with engine.connect() as conn:
            busy = await conn.scalar(
                text(
                    "SELECT count(*) FROM jobs WHERE kind <> 'index_session'"
                    " AND status IN ('queued', 'running')"
                )
            )
        if not busy:
            return
        assert loop.time() < deadline, "jobs did not finish"
        await asyncio.sleep(0.05)


async def _statements(engine: AsyncEngine, client: httpx.AsyncClient, url: str) -> list[str]:
    """The statements that read the turns table on the connection that reads ``url``
    (both layers; the worker's, on connections of its own, are not counted)."""
    seen: list[tuple[int, str]] = []  # (driver connection, statement)

    def executed(conn: Any, _cursor: object, statement: str, *_: object) -> None:
        seen.append((id(conn.connection.driver_connection), statement))  # SQLAlchemy

    drivers: list[Any] = []

    def checkout(dbapi_connection: Any, *_: object) -> None:
        driver = dbapi_connection.driver_connection
        drivers.append((driver, lambda record: seen.append((id(driver), record.query))))
        driver.add_query_logger(drivers[-1][1])

    event.listen(engine.sync_engine, "before_cursor_execute", executed)
    event.listen(engine.sync_engine, "checkout", checkout)
    try:
        r = await client.get(url)
        assert r.status_code == 200, r.text
        await asyncio.sleep(0)  # the driver calls its loggers soon after each statement
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", executed)
        event.remove(engine.sync_engine, "checkout", checkout)
        for driver, logged in drivers:
            driver.remove_query_logger(logged)
    reader = {d for d, statement in seen if "AS has_memories" in statement}
    assert len(reader) == 1, "the context read ran on one connection"
    return [s for d, s in seen if d in reader and "FROM turns" in s]


async def test_a_long_live_history_is_read_in_one_statement(
    unindexed: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    # A change said before more live turns than the first page holds, each long enough
    # that the page alone fills the budget (no second page is read).
    later = [_msg("u5", "user", "Bump the replica count to 5.")]
    later += [
        _msg(f"x{i}", "user" if i % 2 else "assistant", f"{i}. {LONG}")
        for i in range(FIRST_PAGE + 6)
    ]
    await _compacted_then(unindexed, later)
    await _settled(engine)
    async with engine.connect() as conn:
        live = await conn.scalar(text("SELECT count(*) FROM turns WHERE NOT compacted"))
    assert live > FIRST_PAGE  # the page is full: older live turns are read too
    url = "/v1/sessions/s/context?max_tokens=900"
    statements = await _statements(engine, unindexed, url)
    assert len(statements) == 1, statements
    ctx = (await unindexed.get(url)).json()
    assert "- replica count: 5 (was 3)" in _state_of(ctx)

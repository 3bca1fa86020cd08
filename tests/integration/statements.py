"""The statements an engine sends, at both layers: through SQLAlchemy and straight on
the driver (asyncpg's query loggers on every connection checked out meanwhile)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine


@contextlib.contextmanager
def recorded_statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """The statements sent while the block runs (``await asyncio.sleep(0)`` before its
    end: the driver calls its loggers soon after each statement)."""
    statements: list[str] = []
    drivers: list[Any] = []

    def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    def logged(record: Any) -> None:
        statements.append(record.query)

    def checkout(dbapi_connection: Any, *_: object) -> None:
        drivers.append(dbapi_connection.driver_connection)
        drivers[-1].add_query_logger(logged)

    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    event.listen(engine.sync_engine, "checkout", checkout)
    try:
        yield statements
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", seen)
        event.remove(engine.sync_engine, "checkout", checkout)
        for driver in drivers:
            driver.remove_query_logger(logged)
    assert drivers, "no connection was checked out"

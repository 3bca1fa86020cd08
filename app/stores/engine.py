"""The async engine, and the driver glue set up once on each of its connections.

Built by the app factory / CLI from Settings and passed in. Every connection the
engine opens gets the codecs below, so JSON and vectors cross the driver as Python
values both ways: statements bind a dict or a list of floats as they are and read
them back decoded, through SQLAlchemy or through the driver directly.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from pgvector import Vector
from sqlalchemy import TextClause, event
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.util.concurrency import greenlet_spawn

from app.core import jsonio

# jsonb's binary form is a version byte and the JSON text. Results are decoded by
# orjson (the context read's turns and renderings, memory rows: app/core/jsonio.py).
JSONB_VERSION = b"\x01"

# vector_schema: where the pgvector type lives, as the search path resolves `vector`
# (NULL before the migration that creates the extension).
VECTOR_SCHEMA = """
    SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE t.oid = to_regtype('vector')
"""


# A statement is prepared once per pool connection (asyncpg's statement cache). After
# five runs Postgres may swap the plans it makes for each execution's values for one
# generic plan, costed for the table sizes of that moment and kept on the connection
# while the tables grow, until an ANALYZE: made on a fresh database (a handful of rows)
# it can read a whole table where the plan for the values reads a few rows. A statement
# whose generic plan did so carries ``plan_fence`` as a one-row CTE joined to its rows:
# ``never`` is a condition on a parameter that no execution meets, so a plan made for
# the values drops the scan, but a generic plan must cost it as a million-row scan, and
# Postgres keeps planning the statement for its values (~0.2-0.3 ms each time).
PLAN_FENCE_ROWS = 1_000_000


def plan_fence(never: str) -> str:
    """The fence's SQL, one row (``n``); ``never`` is never true for any execution."""
    return f"SELECT count(*) AS n FROM generate_series(1, {PLAN_FENCE_ROWS}) WHERE {never}"


def positional(statement: TextClause) -> tuple[str, tuple[str, ...]]:
    """``statement`` for the driver: its SQL with asyncpg's ``$n`` placeholders, and
    the names of its parameters in ``$n`` order (compiled once, where it is defined)."""
    compiled = statement.compile(dialect=PGDialect_asyncpg())  # type: ignore[no-untyped-call]
    return compiled.string, tuple(compiled.positiontup or ())


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def _jsonb_binary(value: Any) -> bytes:
    return JSONB_VERSION + _json_bytes(value)


def _jsonb_value(data: bytes) -> Any:
    return jsonio.loads(data[1:])


def _vector_binary(value: Vector | list[float]) -> bytes:
    return (value if isinstance(value, Vector) else Vector(value)).to_binary()


def _vector_list(data: bytes) -> list[float]:
    return Vector.from_binary(data).to_list()


async def register_codecs(conn: asyncpg.Connection) -> None:
    """JSON (json, jsonb) and pgvector's ``vector`` as Python values on ``conn``.

    Replaces the codecs SQLAlchemy's dialect installs (they take JSON only as text).
    A database not migrated yet has no ``vector`` type; a connection opened then
    has no vector codec, so ``upgrade_to_head`` closes the connections it used.
    """
    # json's binary form is its text: the decoder gets the bytes as they came (the
    # context read's turns, ~20 kB), not a str the driver decoded and ``loads`` encodes.
    await conn.set_type_codec(
        "json", schema="pg_catalog", encoder=_json_bytes, decoder=jsonio.loads, format="binary"
    )
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        encoder=_jsonb_binary,
        decoder=_jsonb_value,
        format="binary",
    )
    schema = await conn.fetchval(VECTOR_SCHEMA)
    if schema is not None:
        await conn.set_type_codec(
            "vector", schema=schema, encoder=_vector_binary, decoder=_vector_list, format="binary"
        )


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Runs after the dialect's own connect hook, so these codecs are the ones in force.
    dbapi_connection.run_async(register_codecs)


def install_codecs(engine: AsyncEngine) -> None:
    """Every connection ``engine`` opens from now on gets ``register_codecs``."""
    event.listen(engine.sync_engine, "connect", _on_connect)


def _refuse_closed(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    # A backend that ended while its connection sat in the pool (pg_terminate_backend, a
    # restart, an idle timeout) closed the socket, and the driver has seen it: a local
    # flag, no round trip (unlike a pre-ping). The pool drops the connection and checks
    # out another, so no request is handed a dead one.
    if dbapi_connection.driver_connection.is_closed():
        raise DisconnectionError("the server closed this connection")


def refuse_closed_connections(engine: AsyncEngine) -> None:
    """``engine``'s pool never hands out a connection whose server has closed it."""
    event.listen(engine.sync_engine, "checkout", _refuse_closed)


def make_engine(url: str, *, pool_size: int = 10, name: str = "mnemo") -> AsyncEngine:
    """The engine of one process; ``name`` is its connections' ``application_name``
    (``pg_stat_activity``: the API's and the worker's backends told apart)."""
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        # No pre-ping: it costs three round trips per checkout (~1 ms on every request).
        # A connection the server closed while pooled is dropped at checkout
        # (``refuse_closed_connections``: the driver's own flag); one lost mid-request
        # fails that request (a read runs again once, app/api/middleware.py; a write gets
        # a 503 with Retry-After) and is invalidated.
        pool_pre_ping=False,
        pool_recycle=1800,
        # Statement parameters carry message content: never in exception texts or logs.
        hide_parameters=True,
        # asyncpg's statement cache is per connection; keep it, it is what makes the
        # hot paths (ingest, context) cheap.
        connect_args={"server_settings": {"application_name": name}},
    )
    install_codecs(engine)
    refuse_closed_connections(engine)
    return engine


def renice_backend(conn: asyncpg.Connection, niceness: int) -> None:
    """Lower the CPU priority of ``conn``'s Postgres backend process to ``niceness``
    (never raise it). Only for a database on this host whose processes this user may
    renice (the embedded one); otherwise a no-op."""
    with contextlib.suppress(OSError):  # another host's pid, or not ours to renice
        pid = conn.get_server_pid()
        os.setpriority(os.PRIO_PROCESS, pid, max(niceness, os.getpriority(os.PRIO_PROCESS, pid)))


def renice_backends(engine: AsyncEngine, niceness: int) -> None:
    """Every connection ``engine`` opens from now on gets ``renice_backend``."""

    def lower(dbapi_connection: Any, _record: Any) -> None:
        renice_backend(dbapi_connection.driver_connection, niceness)

    event.listen(engine.sync_engine, "connect", lower)


async def driver_connection(conn: AsyncConnection) -> asyncpg.Connection:
    """The asyncpg connection under a SQLAlchemy one, for the few hottest reads.

    Used without SQLAlchemy's implicit BEGIN: a single statement is its own snapshot.
    """
    fairy = await conn.get_raw_connection()
    raw = fairy.driver_connection
    assert isinstance(raw, asyncpg.Connection)
    return raw


# What a connection that is gone raises through the driver: its socket closed, or the
# server ending its session (these are ``PostgresError``s, not connection errors, in
# asyncpg) when an operator terminates the backend or the server shuts down fast (57P01),
# crashes (57P02), is starting or stopping (57P03), or an idle timeout ends it (57P05,
# 25P03).
CONNECTION_LOST = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    OSError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.IdleSessionTimeoutError,
    asyncpg.IdleInTransactionSessionTimeoutError,
)


@contextlib.asynccontextmanager
async def driver_checkout(engine: AsyncEngine) -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection's asyncpg connection, for a caller that sends every statement
    through the driver (the context read, the memory search): one checkout from
    ``engine``'s pool and its return, without the SQLAlchemy connection around it
    (starting one, setting its isolation level and closing it cost ~90 µs of CPU against
    ~20). No ``BEGIN``: each statement is its own transaction, as on ``autocommit``'s
    connections, so the pool's reset on return sends nothing. A connection that is gone
    is invalidated, as SQLAlchemy does for its own."""
    pooled = await engine.raw_connection()
    try:
        driver = pooled.driver_connection
        assert isinstance(driver, asyncpg.Connection)
        yield driver
    except CONNECTION_LOST:
        await greenlet_spawn(pooled.invalidate)
        raise
    finally:
        await greenlet_spawn(pooled.close)


@contextlib.asynccontextmanager
async def autocommit(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in autocommit, for reads and for a write that is one statement.

    SQLAlchemy's asyncpg adapter otherwise sends ``BEGIN`` before the first statement
    and ``ROLLBACK`` (or ``COMMIT``) when the connection goes back to the pool: two of
    the three round trips of a one-statement job claim or read. Each statement is its
    own snapshot and transaction (a single statement is atomic); the isolation level
    is reset when the connection returns to the pool (client side, no round trip).
    """
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn

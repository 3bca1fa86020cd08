"""The async engine. Built by the app factory / CLI from Settings and passed in."""

from __future__ import annotations

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine


def make_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        # No pre-ping: it costs three round trips per checkout (~1 ms on every request).
        # A connection broken by a database restart fails one request with a 503
        # (problem+json, Retry-After) and the pool is invalidated and refilled.
        pool_pre_ping=False,
        pool_recycle=1800,
        # Statement parameters carry message content: never in exception texts or logs.
        hide_parameters=True,
        # asyncpg's statement cache is per connection; keep it, it is what makes the
        # hot paths (ingest, context) cheap.
        connect_args={"server_settings": {"application_name": "mnemo"}},
    )


async def driver_connection(conn: AsyncConnection) -> asyncpg.Connection:
    """The asyncpg connection under a SQLAlchemy one, for the few hottest reads.

    Used without SQLAlchemy's implicit BEGIN: a single statement is its own snapshot.
    """
    fairy = await conn.get_raw_connection()
    raw = fairy.driver_connection
    assert isinstance(raw, asyncpg.Connection)
    return raw

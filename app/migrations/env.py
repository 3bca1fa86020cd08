"""Alembic environment, async (asyncpg).

Two ways in: `mnemo migrate` / app startup hand over an open connection in
``config.attributes["connection"]``; the plain `alembic` CLI builds an engine
from MNEMO_DATABASE_URL.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.stores.tables import metadata

config = context.config
target_metadata = metadata


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_new_engine() -> None:
    from app.core.config import Settings

    url = Settings().async_database_url
    if url is None:
        raise SystemExit(
            "MNEMO_DATABASE_URL is not set; use `mnemo migrate` for the embedded database"
        )
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported")

connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(_run_with_new_engine())

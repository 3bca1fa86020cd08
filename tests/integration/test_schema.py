"""`alembic upgrade head` yields exactly the schema the code expects."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.stores.migrate import head_revision
from app.stores.tables import metadata


async def test_migrations_match_the_table_models(engine: AsyncEngine) -> None:
    def diff(sync_conn):  # type: ignore[no-untyped-def]
        ctx = MigrationContext.configure(sync_conn, opts={"compare_server_default": True})
        return compare_metadata(ctx, metadata)

    async with engine.connect() as conn:
        changes = await conn.run_sync(diff)
    assert changes == []


async def test_database_is_at_head_and_has_pgvector(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
        vector = (
            await conn.execute(text("SELECT extversion FROM pg_extension WHERE extname='vector'"))
        ).scalar()
    assert version == head_revision()
    assert vector is not None and vector.startswith("0.8")

"""Apply Alembic migrations programmatically, and tell whether a database is current."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

# Migrations and their alembic.ini are package data (app/migrations, app/alembic.ini):
# an installed wheel migrates exactly like a source checkout.
ALEMBIC_INI = Path(__file__).resolve().parents[1] / "alembic.ini"


def alembic_config() -> Config:
    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(ALEMBIC_INI.parent / "migrations"))
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade(connection: Connection) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")


async def upgrade_to_head(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade)
    # A connection opened before pgvector's type existed has no codec for it.
    await engine.dispose()


async def current_revision(engine: AsyncEngine) -> str | None:
    def read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)


VERSION = text("SELECT version_num FROM alembic_version")


async def schema_version(engine: AsyncEngine) -> str | None:
    """The revision the database is at, read as the readiness probe reads it (raises
    while the database is unreachable or not migrated at all)."""
    async with engine.connect() as conn:
        found = (await conn.execute(VERSION)).scalar()
    return None if found is None else str(found)

"""The owner of ``sweeps``: what each background sweep last finished for."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

# swept_for: the stamp the sweep :name last finished for (none: it never finished).
SWEPT_FOR = text("SELECT stamp FROM sweeps WHERE name = :name")

# finish_sweep: the sweep :name finished for :stamp.
FINISH_SWEEP = text("""
    INSERT INTO sweeps (name, stamp) VALUES (:name, :stamp)
    ON CONFLICT (name) DO UPDATE SET stamp = EXCLUDED.stamp, finished_at = now()
""")


async def swept_for(conn: AsyncConnection, *, name: str) -> str | None:
    found = (await conn.execute(SWEPT_FOR, {"name": name})).scalar_one_or_none()
    return None if found is None else str(found)


async def finish_sweep(conn: AsyncConnection, *, name: str, stamp: str) -> None:
    await conn.execute(FINISH_SWEEP, {"name": name, "stamp": stamp})

"""Session upkeep run by the worker."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from app.services.jobs import JobContext
from app.stores import sessions


async def recount_tokens(ctx: JobContext) -> None:
    """Repair job: the counters the trigger reads, rebuilt from the archive."""

    async def apply(conn: AsyncConnection) -> None:
        await sessions.recount(conn, session_pk=ctx.job.session_id)

    await ctx.commit(apply)

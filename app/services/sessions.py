"""Session upkeep run by the worker."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.jobs import JobKind
from app.services.jobs import JobContext, job
from app.stores import sessions


@job(JobKind.RECOUNT_TOKENS)
async def recount_tokens(ctx: JobContext, deps: None) -> None:
    """Repair job: the counters the trigger reads, rebuilt from the archive."""

    async def apply(conn: AsyncConnection) -> None:
        await sessions.recount(conn, session_pk=ctx.job.session_id)

    await ctx.commit(apply)

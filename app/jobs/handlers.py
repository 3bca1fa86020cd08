"""The job kinds the worker knows, by name."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.worker import Handler, JobContext

# recount_tokens: recompute a session's live-history token counter from its turns.
RECOUNT = text("""
    UPDATE sessions s SET history_tokens = coalesce(
        (SELECT sum(tokens) FROM turns t WHERE t.session_id = s.id AND NOT t.compacted), 0)
    WHERE s.id = :sid
""")


async def recount_tokens(ctx: JobContext) -> None:
    """Repair job: the counter the trigger reads, rebuilt from the archive."""

    async def apply(conn: AsyncConnection) -> None:
        await conn.execute(RECOUNT, {"sid": ctx.job.session_id})

    await ctx.commit(apply)


def default_handlers() -> dict[str, Handler]:
    return {"recount_tokens": recount_tokens}

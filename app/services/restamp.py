"""The restamp sweep: the units records an upgrade made stale, stored again in the
background, for the sessions nobody posts to.

Each live user turn's units record is stamped with the rules that made it
(``live_notes.RULES_STAMP``). An upgrade that changes the rules makes every stored
record stale: a context read never trusts one and reads the turn from its text
instead (once per API process, and again after each restart), and the next job that
reads the session's turns (index, units, compression) stores it again. A session
nobody posts to gets no such job. So a worker that starts on a database holding stale
records (``start_sweep``) queues one job of this kind, claimed after every other kind
(``JobKind.RESTAMP_UNITS``). It reads the next few sessions that have stale live user
turns, by session row id, stores their records, and queues its successor from where it
stopped in the transaction that marks it done: one job at a time, resumable (a job cut
short is run again from its cursor), done when no session is left. A fresh job that
waited past ``job_aging_s`` goes before fresh real work (the queue's aging): one batch
of a few sessions, a few hundred ms of CPU, each time.

Idempotent, and safe beside ingest, a pop, a delete, a compression and the other
units jobs: each session's records are stored under its row lock (every writer of its
turns takes that lock first: a post, a pop or a delete of the session waits the few ms
of the write, and no lock is taken in another order), and only where none is stored or
other rules stored it (``sessions.set_turn_units``): read by the same rules from the
same text, whoever comes first stores the record the others would have. A turn popped,
or a session deleted, meanwhile is not written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.compression.live_notes import RULES_STAMP
from app.core.jobs import JobKind
from app.services.jobs import JobContext, job
from app.services.read_units import records_of
from app.stores import queue, sessions

log = logging.getLogger(__name__)

# Sessions one job re-stores (about 0.4 ms of CPU a live user turn: a job of a bulk
# workload's sessions takes 0.1-0.3 s), then its successor goes back in the queue.
SESSIONS_PER_JOB = 16
# The job works across tenants; the queue's rows need one.
EVERY_TENANT = "*"
# One waiting job at a time (the queue's unique index of waiting jobs by dedup key).
DEDUP_KEY = "restamp_units"
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class RestampDeps:
    # Told how many records each job stored again (a metric).
    on_restamped: Callable[[int], None] | None = None


@job(JobKind.RESTAMP_UNITS)
async def restamp_units(ctx: JobContext, deps: RestampDeps) -> None:
    """Store again the stale records of the next sessions after the job's cursor, and
    queue the next job from the last of them."""
    after = int(ctx.job.payload.get("after", 0))
    async with ctx.engine.connect() as conn:
        stale = await sessions.stale_live_turns(
            conn, after_session=after, sessions=SESSIONS_PER_JOB, rules=RULES_STAMP
        )
    for session_pk, turns in stale.items():
        records = await records_of(turns)
        async with ctx.engine.begin() as conn:
            await store(conn, session_pk=session_pk, records=records)
        if deps.on_restamped is not None:
            deps.on_restamped(len(records))
    more = len(stale) == SESSIONS_PER_JOB
    await ctx.commit(partial(_then, after=max(stale, default=after), more=more))


async def store(conn: AsyncConnection, *, session_pk: int, records: list[tuple[int, str]]) -> None:
    """One session's records, under its row lock (gone: nothing is written)."""
    await sessions.lock_for_compaction(conn, session_pk=session_pk)
    await sessions.set_turn_units(conn, session_pk=session_pk, units=records, rules=RULES_STAMP)


async def _then(conn: AsyncConnection, *, after: int, more: bool) -> None:
    if more:
        await enqueue(conn, after=after)


async def enqueue(conn: AsyncConnection, *, after: int = 0) -> int | None:
    """Queue the sweep from session row id ``after``; None when a job of it waits."""
    return await queue.enqueue(
        conn,
        tenant_id=EVERY_TENANT,
        session_id=None,
        kind=JobKind.RESTAMP_UNITS,
        payload={"after": after},
        max_attempts=MAX_ATTEMPTS,
        dedup_key=DEDUP_KEY,
    )


async def start_sweep(engine: AsyncEngine) -> int | None:
    """At a worker's start: queue the sweep when a live user turn's record is stale (an
    upgrade changed the rules); nothing when none is, or a job of it already waits. The
    check finds the first stale session by the live turns' index, and walks all of it
    when there is none (once per worker start)."""
    async with engine.begin() as conn:
        first = await sessions.stale_live_turns(
            conn, after_session=0, sessions=1, rules=RULES_STAMP
        )
        queued = await enqueue(conn) if first else None
    if queued is not None:
        log.info("units records stale after an upgrade: queued the restamp sweep (job %s)", queued)
    return queued

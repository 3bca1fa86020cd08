"""The restamp sweep: the units records an upgrade made stale, stored again in the
background, for the sessions nobody posts to.

Each live user turn's units record is stamped with the rules that made it
(``live_notes.RULES_STAMP``). An upgrade that changes the rules makes every stored
record stale: a context read never trusts one and reads the turn from its text
instead (once per API process, and again after each restart), and the next job that
reads the session's turns (index, units, compression) stores it again. A session
nobody posts to gets no such job. So a worker queues this sweep at its start
(``start_sweep``) unless it finished for the rules the worker runs (table ``sweeps``):
once per change of the rules. It is claimed after every other kind
(``JobKind.RESTAMP_UNITS``). Each job walks the live turns of the next
``SESSION_SPAN`` sessions by row id (a bounded read), stores the stale records of up to
``SESSIONS_PER_JOB`` of them, and queues its successor from where it stopped in the
transaction that marks it done: one job at a time, resumable (a job cut short runs
again from its cursor). The job that reaches the newest session records the stamp as
swept instead. A fresh job that waited past ``job_aging_s`` goes before fresh real
work (the queue's aging): one batch, a few hundred ms of CPU at most, each time.

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
from app.stores import queue, sessions, sweeps

log = logging.getLogger(__name__)

# Sessions one job re-stores (about 0.4 ms of CPU a live user turn: a job of a bulk
# workload's sessions takes 0.1-0.3 s), then its successor goes back in the queue.
SESSIONS_PER_JOB = 16
# Sessions (by row id) one job looks through for stale records, at most: each job's
# read stays bounded when few are stale (a walk of their live turns' index entries).
SESSION_SPAN = 1000
# The job works across tenants; the queue's rows need one.
EVERY_TENANT = "*"
# One waiting job at a time (the queue's unique index of waiting jobs by dedup key), and
# the sweep's name in ``sweeps``.
NAME = "restamp_units"
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class RestampDeps:
    # Told how many records each session's write stored again (a metric).
    on_restamped: Callable[[int], None] | None = None


@job(JobKind.RESTAMP_UNITS)
async def restamp_units(ctx: JobContext, deps: RestampDeps) -> None:
    """Store again the stale records of the next sessions after the job's cursor, then
    queue the next job from there, or record the sweep as done for these rules."""
    after = int(ctx.job.payload.get("after", 0))
    upto = after + SESSION_SPAN
    async with ctx.engine.connect() as conn:
        last = await sessions.last_session(conn)
        stale = await sessions.stale_live_turns(
            conn, after=after, upto=upto, sessions=SESSIONS_PER_JOB, rules=RULES_STAMP
        )
    for session_pk, turns in stale.items():
        records = await records_of(turns)
        async with ctx.engine.begin() as conn:
            await store(conn, session_pk=session_pk, records=records)
        if deps.on_restamped is not None:
            deps.on_restamped(len(records))
    reached = max(stale) if len(stale) == SESSIONS_PER_JOB else upto
    await ctx.commit(partial(_then, reached=reached, last=last))


async def store(conn: AsyncConnection, *, session_pk: int, records: list[tuple[int, str]]) -> None:
    """One session's records, under its row lock (gone: nothing is written)."""
    await sessions.lock_for_compaction(conn, session_pk=session_pk)
    await sessions.set_turn_units(conn, session_pk=session_pk, units=records, rules=RULES_STAMP)


async def _then(conn: AsyncConnection, *, reached: int, last: int) -> None:
    """The next job from ``reached``, or, past the newest session, the sweep done."""
    if reached < last:
        await enqueue(conn, after=reached)
    else:
        await sweeps.finish_sweep(conn, name=NAME, stamp=RULES_STAMP)
        log.info("restamp sweep done: every live units record is by the current rules")


async def enqueue(conn: AsyncConnection, *, after: int = 0) -> int | None:
    """Queue the sweep from session row id ``after``; None when a job of it waits."""
    return await queue.enqueue(
        conn,
        tenant_id=EVERY_TENANT,
        session_id=None,
        kind=JobKind.RESTAMP_UNITS,
        payload={"after": after},
        max_attempts=MAX_ATTEMPTS,
        dedup_key=NAME,
    )


async def start_sweep(engine: AsyncEngine) -> int | None:
    """At a worker's start: queue the sweep unless it finished for the current rules
    (or a job of it waits already). One row read: nothing is walked at start."""
    async with engine.begin() as conn:
        if await sweeps.swept_for(conn, name=NAME) == RULES_STAMP:
            return None
        queued = await enqueue(conn)
    if queued is not None:
        log.info("queued the restamp sweep (job %s): stale units records are stored again", queued)
    return queued

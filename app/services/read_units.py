"""The units job: what a bulk post's user turns state, stored soon after the post.

Ingest stores what each user turn of a conversation's post states
(``live_notes.units_record``), but leaves a bulk post (user texts over
``ingest.UNITS_POST_CHARS``) to the worker: read at ingest, it halved batched ingest.
The index job reads them when it indexes the turns, but it is claimed after the
compressions and waits for the embedding; until then every API process reads those
turns from their text on its first context read of the session (13-19 ms of its event
loop, which the reads queued behind it wait out). So ingest enqueues this job for a
bulk post, claimed before every other kind (``JobKind.READ_UNITS``). It reads the turns
the index job would read (after the session's closed episodes, ``units IS NULL``) and
stores their records.

Idempotent, and safe beside the index job, a compression and a pop: each of them
stores a turn's record only where none is stored yet, or other rules stored it (an
upgrade changed them; ``sessions.set_turn_units``), read by the same rules from the
same text, so whoever comes first stores the record the others would have; a turn
popped, or a session deleted, meanwhile is not written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial

from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.live_notes import RULES_STAMP, units_record
from app.core.jobs import JobKind
from app.services.jobs import JobContext, job
from app.stores import sessions
from app.stores.engine import autocommit

# Sessions claimed together: one claim, and the job_batch_wait_s pause, for several.
# Each is stored with its job in a transaction of its own, as soon as it is read.
UNITS_JOBS_PER_BATCH = 8


@job(JobKind.READ_UNITS, batch=UNITS_JOBS_PER_BATCH)
async def read_units(ctx: JobContext, deps: None) -> None:
    """Store what the unread user turns of the claimed jobs' sessions state."""
    for claimed in ctx.jobs:
        sid = claimed.session_id
        unread = None if sid is None else await unread_turns(ctx.engine, session_pk=sid)
        if sid is None or unread is None:
            continue  # the session was deleted meanwhile, and its job with it
        records = await records_of(unread)
        store = partial(sessions.set_turn_units, session_pk=sid, units=records, rules=RULES_STAMP)
        await ctx.commit(store, of=claimed)


async def unread_turns(engine: AsyncEngine, *, session_pk: int) -> list[tuple[int, str]] | None:
    """(row id, text) of the session's user turns the index job would read whose units
    are not stored yet; None when the session is gone."""
    async with autocommit(engine) as conn:  # reads only: no BEGIN/ROLLBACK
        head = await sessions.index_head(conn, session_pk=session_pk)
        if head is None:
            return None
        _, _, unread = await sessions.turns_after_marked(
            conn, session_pk=head.id, after_seq=head.episode_seq, rules=RULES_STAMP
        )
    return unread


async def records_of(unread: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """Each turn's units record, by row id. A turn costs ~0.3-0.6 ms of CPU: the loop is
    let go between turns, for a worker that runs inside an API process."""
    records = []
    for pk, said in unread:
        records.append((pk, units_record(said)))
        await asyncio.sleep(0)
    return records

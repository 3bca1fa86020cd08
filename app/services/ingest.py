"""Store posted turns: one transaction for the turns and any job they cause.

Concurrent posts to one session serialise on the session row (``FOR UPDATE``),
which is what keeps ``seq`` gapless: the seq allocator is ``turn_count`` on that
row. Client message ids make a retried post a no-op.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.live_notes import units_record
from app.core.errors import Conflict
from app.core.jobs import JobKind
from app.core.turns import PreparedTurn
from app.stores import queue, sessions


@dataclass(frozen=True)
class SessionCounters:
    session_pk: int
    turn_count: int
    history_tokens: int
    uncompacted_turns: int
    compressions: int


# A trigger decision: given the session's counters after the insert and the new
# turns with their seqs, the reason to compress now, or None. It may read more of
# the session through the connection (recent turns, the state) when it needs to.
TriggerPolicy = Callable[
    [AsyncConnection, SessionCounters, Sequence[tuple[int, PreparedTurn]]],
    Awaitable[str | None],
]


@dataclass(frozen=True)
class Ack:
    """Where one posted message went: its id, seq and tokens; a duplicate was stored before."""

    id: str
    seq: int
    tokens: int
    duplicate: bool


@dataclass(frozen=True)
class Ingested:
    session_id: str
    user_id: str
    turns: list[Ack]
    history_tokens: int
    compression_scheduled: bool
    trigger: str | None


# What a user turn states (its units: the rules, pinned facts, next steps and open items
# a context read adds while the turn is live) is read here, once, so that no context
# read has to read it from the text: for the post of a conversation (user texts of at
# most UNITS_POST_CHARS in all). The rule extractor costs about 3 ms of CPU per 1,000
# characters: read at ingest, a bulk post of 100 messages would cost twice as much
# (batched ingest halved). A bulk post's turns are read by the worker: the post
# enqueues a units job, claimed before every other kind (``services/read_units.py``);
# until it runs, once per process by the reads (``live_notes.KEPT_READINGS``).
UNITS_POST_CHARS = 2_000


def _said(turns: Sequence[PreparedTurn]) -> list[str | None]:
    """Each turn's text if it is a user turn with text, else None."""
    return [t.content if t.role == "user" and t.content else None for t in turns]


def bulk_post(turns: Sequence[PreparedTurn]) -> bool:
    """Whether the post's user texts exceed ``UNITS_POST_CHARS``: its units are left to
    the worker."""
    return sum(len(text) for text in _said(turns) if text) > UNITS_POST_CHARS


def units_at_ingest(turns: Sequence[PreparedTurn], *, bulk: bool) -> list[str | None]:
    """Each turn's units record (``live_notes.units_record``), or None: not a user turn
    with text, or a bulk post (``bulk_post``: left to the worker)."""
    if bulk:
        return [None] * len(turns)
    return [units_record(text) if text else None for text in _said(turns)]


def _generated_id() -> str:
    # "_" is outside the client id alphabet, so a generated id never collides.
    return "t_" + uuid.uuid4().hex


async def _lock_or_create(
    conn: AsyncConnection, *, tenant: str, session: str, user: str, client_ids: list[str]
) -> sessions.Locked:
    row = await sessions.lock_session(conn, tenant=tenant, session=session, client_ids=client_ids)
    if row is None:
        await sessions.create_session(conn, tenant=tenant, session=session, user=user)
        row = await sessions.lock_session(
            conn, tenant=tenant, session=session, client_ids=client_ids
        )
        assert row is not None  # created, or found created by a racing first post
    if row.user_external != user:
        raise Conflict(
            f"session {session!r} belongs to another user; it cannot be posted as {user!r}"
        )
    return row


async def ingest_turns(
    conn: AsyncConnection,
    *,
    tenant: str,
    session: str,
    user: str,
    turns: Sequence[PreparedTurn],
    policy: TriggerPolicy,
    job_max_attempts: int,
    index_delay_s: float = 0.0,
) -> Ingested:
    """Store ``turns`` in the caller's transaction and enqueue what they trigger."""
    # Read before the session row is locked: a post to the same session waits less.
    bulk = bulk_post(turns)
    records = units_at_ingest(turns, bulk=bulk)
    client_ids = [t.client_id for t in turns if t.client_id]
    row = await _lock_or_create(
        conn, tenant=tenant, session=session, user=user, client_ids=client_ids
    )
    sid = row.id
    known = {
        k.external_id: Ack(id=k.external_id, seq=k.seq, tokens=k.tokens, duplicate=True)
        for k in row.known
    }

    acks: list[Ack] = []
    new: list[tuple[int, str, PreparedTurn]] = []
    units: list[str | None] = []
    next_seq = row.turn_count + 1
    for t, record in zip(turns, records, strict=True):
        if t.client_id and t.client_id in known:
            acks.append(known[t.client_id])
            continue
        external_id = t.client_id or _generated_id()
        ack = Ack(id=external_id, seq=next_seq, tokens=t.tokens, duplicate=False)
        if t.client_id:
            # The same id twice in one post: the second is a duplicate of the first.
            known[t.client_id] = replace(ack, duplicate=True)
        acks.append(ack)
        new.append((next_seq, external_id, t))
        units.append(record)
        next_seq += 1

    history_tokens = row.history_tokens
    trigger = None
    scheduled = False
    if new:
        # Episodes and the embedding /context reuses: a user turn's index job rides on
        # the append; the worker batches them.
        index = any(t.role == "user" and t.content for _, _, t in new)
        bumped = await sessions.append_turns(
            conn,
            tenant=tenant,
            session_pk=sid,
            new=new,
            units=units,
            job=queue.JobWanted(
                kind=JobKind.INDEX_SESSION, max_attempts=job_max_attempts, delay_s=index_delay_s
            )
            if index
            else None,
        )
        if index and bulk:
            await queue.enqueue(
                conn,
                tenant_id=tenant,
                session_id=sid,
                kind=JobKind.READ_UNITS,
                max_attempts=job_max_attempts,
            )
        history_tokens = bumped.history_tokens
        counters = SessionCounters(
            session_pk=sid,
            turn_count=bumped.turn_count,
            history_tokens=history_tokens,
            uncompacted_turns=bumped.live_turns,
            compressions=row.compressions,
        )
        trigger = await policy(conn, counters, [(seq, t) for seq, _, t in new])
        if trigger is not None:
            await queue.enqueue(
                conn,
                tenant_id=tenant,
                session_id=sid,
                kind=JobKind.COMPRESS,
                payload={"trigger": trigger},
                max_attempts=job_max_attempts,
            )
            scheduled = True

    return Ingested(
        session_id=session,
        user_id=user,
        turns=acks,
        history_tokens=history_tokens,
        compression_scheduled=scheduled,
        trigger=trigger,
    )

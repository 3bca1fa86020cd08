"""Pop: remove a session's newest turn and return it (the OpenAI Agents SDK's
``Session.pop_item``; an agent undoing its last message).

One transaction under the session's row lock, the lock posts and compressions take,
so a pop is ordered with them:

- the turn goes, and every trace of it: the session's counters (its seq is given back
  to the allocator, so seqs stay gapless), the embedded newest user turn that
  ``/context`` and the topic-drift check reuse, the index rows (episodes, single turns)
  that cover it, the change notice's mark; re-posting its message id stores it again;
- a turn already compacted into the task state cannot be popped (409): the state
  holds what was extracted from it, and no pop can take that back;
- a compression that took the turn before the pop fails its commit (the turn is gone,
  ``StaleSnapshot``) and runs again from a fresh snapshot; an index run that read it
  skips its commit (``index_read_current``) and the run this pop queues redoes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import Conflict, NotFound
from app.core.jobs import JobKind
from app.stores import compression, memories, queue, sessions
from app.stores.sessions import StoredTurn


class NoTurns(NotFound):
    title = "No turn to pop"
    slug = "no-turns"


class TurnCompacted(Conflict):
    title = "Turn compacted"
    slug = "turn-compacted"


@dataclass(frozen=True)
class Popped:
    session_id: str
    turn: StoredTurn
    turn_count: int
    history_tokens: int


async def pop_turn(
    conn: AsyncConnection,
    *,
    tenant: str,
    session: str,
    job_max_attempts: int,
    index_delay_s: float = 0.0,
) -> Popped:
    """In the caller's transaction: remove the newest turn of ``session``."""
    locked = await sessions.lock_session(conn, tenant=tenant, session=session)
    if locked is None:
        raise NotFound(f"session {session!r} not found")
    newest = await sessions.newest_turn(conn, session_pk=locked.id)
    if newest is None:
        raise NoTurns(f"session {session!r} has no turns to pop")
    turn = newest.turn
    if turn.compacted:
        raise TurnCompacted(
            f"the newest turn of session {session!r} (seq {turn.seq}, id {turn.id!r}) was"
            f" compacted into the task state by compression event {newest.event_id};"
            " a compacted turn cannot be popped"
        )
    mark = await memories.forget_indexed_from(
        conn, tenant=tenant, session_pk=locked.id, seq=turn.seq
    )
    after = await sessions.remove_newest(
        conn, tenant=tenant, session_pk=locked.id, turn_pk=newest.pk, index_mark=mark
    )
    await compression.notice_before(conn, session_pk=locked.id, seq=turn.seq)
    if after.turn_count > after.episode_seq:
        # Turns the dropped rows covered (or that an index run racing this pop read and
        # will not commit) are indexed again.
        await queue.enqueue(
            conn,
            tenant_id=tenant,
            session_id=locked.id,
            kind=JobKind.INDEX_SESSION,
            max_attempts=job_max_attempts,
            delay_s=index_delay_s,
        )
    return Popped(
        session_id=session,
        turn=turn,
        turn_count=after.turn_count,
        history_tokens=after.history_tokens,
    )

"""Store posted turns: one transaction for the turns and any job they cause.

Concurrent posts to one session serialise on the session row (``FOR UPDATE``),
which is what keeps ``seq`` gapless: the seq allocator is ``turn_count`` on that
row. Client message ids make a retried post a no-op.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.api.schemas import MessageIn, TurnAck, TurnsOut
from app.core.errors import Conflict
from app.stores import queue


@dataclass(frozen=True)
class PreparedTurn:
    """A validated message with its token count, ready to insert."""

    client_id: str | None
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    name: str | None
    tokens: int
    emphasized: bool
    metadata: dict[str, Any]
    created_at: datetime | None


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


def prepare(
    messages: Sequence[MessageIn], count: Callable[[dict[str, Any]], int]
) -> list[PreparedTurn]:
    prepared = []
    for m in messages:
        calls = [c.model_dump(mode="json") for c in m.tool_calls] if m.tool_calls else None
        as_message = {
            "role": m.role,
            "content": m.content,
            "name": m.name,
            "tool_calls": calls,
            "tool_call_id": m.tool_call_id,
        }
        prepared.append(
            PreparedTurn(
                client_id=m.id,
                role=m.role,
                content=m.content,
                tool_calls=calls,
                tool_call_id=m.tool_call_id,
                name=m.name,
                tokens=count(as_message),
                emphasized=m.emphasized,
                metadata=m.metadata,
                created_at=m.created_at,
            )
        )
    return prepared


# lock_session: serialises posts to one session for the rest of the transaction.
LOCK_SESSION = text("""
    SELECT s.id, u.external_id AS user_external, s.turn_count, s.history_tokens,
           s.live_turns, s.compressions
    FROM sessions s JOIN users u ON u.id = s.user_id
    WHERE s.tenant_id = :tenant AND s.external_id = :session
    FOR UPDATE OF s
""")

# create_session: first post to a session (and maybe first sight of its user);
# a racing first post finds the row created by the winner.
CREATE_SESSION = text("""
    WITH u AS (
        INSERT INTO users (tenant_id, external_id) VALUES (:tenant, :user)
        ON CONFLICT (tenant_id, external_id) DO UPDATE SET external_id = EXCLUDED.external_id
        RETURNING id)
    INSERT INTO sessions (tenant_id, external_id, user_id)
    SELECT :tenant, :session, u.id FROM u
    ON CONFLICT (tenant_id, external_id) DO NOTHING
""")

# known_turns: turns already stored under the client ids of this post.
KNOWN_TURNS = text("""
    SELECT external_id, seq, tokens FROM turns
    WHERE session_id = :sid AND external_id = ANY(CAST(:ids AS text[]))
""")

# append_turns: the whole batch in one statement, and the session's counters with it
# (turn_count is the seq allocator; history_tokens and live_turns feed the trigger).
APPEND_TURNS = text("""
    WITH inserted AS (
        INSERT INTO turns (session_id, seq, external_id, role, content, tool_calls,
                           tool_call_id, name, tokens, emphasized, metadata, created_at)
        SELECT :sid, t.seq, t.external_id, t.role, t.content, CAST(t.tool_calls AS jsonb),
               t.tool_call_id, t.name, t.tokens, t.emphasized, CAST(t.metadata AS jsonb),
               coalesce(t.created_at, now())
        FROM unnest(CAST(:seqs AS int[]), CAST(:external_ids AS text[]),
                    CAST(:roles AS text[]), CAST(:contents AS text[]),
                    CAST(:tool_calls AS text[]), CAST(:tool_call_ids AS text[]),
                    CAST(:names AS text[]), CAST(:tokens AS int[]), CAST(:emphasized AS bool[]),
                    CAST(:metadata AS text[]), CAST(:created_at AS timestamptz[]))
             AS t(seq, external_id, role, content, tool_calls, tool_call_id, name, tokens,
                  emphasized, metadata, created_at)
        RETURNING 1)
    UPDATE sessions SET turn_count = turn_count + :n,
                        live_turns = live_turns + :n,
                        history_tokens = history_tokens + :added_tokens,
                        total_tokens = total_tokens + :added_tokens,
                        updated_at = now()
    WHERE id = :sid
    RETURNING turn_count, history_tokens, live_turns
""")


def _generated_id() -> str:
    # "_" is outside the client id alphabet, so a generated id never collides.
    return "t_" + uuid.uuid4().hex


async def _lock_or_create(conn: AsyncConnection, *, tenant: str, session: str, user: str) -> Any:
    keys = {"tenant": tenant, "session": session}
    row = (await conn.execute(LOCK_SESSION, keys)).first()
    if row is None:
        await conn.execute(CREATE_SESSION, {**keys, "user": user})
        row = (await conn.execute(LOCK_SESSION, keys)).one()
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
) -> TurnsOut:
    """Store ``turns`` in the caller's transaction and enqueue what they trigger."""
    row = await _lock_or_create(conn, tenant=tenant, session=session, user=user)
    sid = row.id

    client_ids = [t.client_id for t in turns if t.client_id]
    known: dict[str, TurnAck] = {}
    if client_ids:
        for k in await conn.execute(KNOWN_TURNS, {"sid": sid, "ids": client_ids}):
            known[k.external_id] = TurnAck(
                id=k.external_id, seq=k.seq, tokens=k.tokens, duplicate=True
            )

    acks: list[TurnAck] = []
    new: list[tuple[int, str, PreparedTurn]] = []
    next_seq = row.turn_count + 1
    for t in turns:
        if t.client_id and t.client_id in known:
            acks.append(known[t.client_id])
            continue
        external_id = t.client_id or _generated_id()
        ack = TurnAck(id=external_id, seq=next_seq, tokens=t.tokens, duplicate=False)
        if t.client_id:
            # The same id twice in one post: the second is a duplicate of the first.
            known[t.client_id] = ack.model_copy(update={"duplicate": True})
        acks.append(ack)
        new.append((next_seq, external_id, t))
        next_seq += 1

    history_tokens = row.history_tokens
    trigger = None
    scheduled = False
    if new:
        bumped = (await conn.execute(APPEND_TURNS, _columns(sid, new))).one()
        history_tokens = bumped.history_tokens
        counters = SessionCounters(
            session_pk=sid,
            turn_count=bumped.turn_count,
            history_tokens=history_tokens,
            uncompacted_turns=bumped.live_turns,
            compressions=row.compressions,
        )
        trigger = await policy(conn, counters, [(seq, t) for seq, _, t in new])
        if any(t.role == "user" and t.content for _, _, t in new):
            # Episodes and the embedding /context reuses; the worker batches them.
            await queue.enqueue(
                conn,
                tenant_id=tenant,
                session_id=sid,
                kind="index_session",
                max_attempts=job_max_attempts,
                delay_s=index_delay_s,
            )
        if trigger is not None:
            await queue.enqueue(
                conn,
                tenant_id=tenant,
                session_id=sid,
                kind="compress",
                payload={"trigger": trigger},
                max_attempts=job_max_attempts,
            )
            scheduled = True

    return TurnsOut(
        session_id=session,
        user_id=user,
        turns=acks,
        history_tokens=history_tokens,
        compression_scheduled=scheduled,
        trigger=trigger,
    )


def _columns(sid: int, new: Sequence[tuple[int, str, PreparedTurn]]) -> dict[str, Any]:
    def jsonish(value: Any) -> str | None:
        return None if value is None else json.dumps(value, ensure_ascii=False)

    return {
        "sid": sid,
        "n": len(new),
        "added_tokens": sum(t.tokens for _, _, t in new),
        "seqs": [seq for seq, _, _ in new],
        "external_ids": [ext for _, ext, _ in new],
        "roles": [t.role for _, _, t in new],
        "contents": [t.content for _, _, t in new],
        "tool_calls": [jsonish(t.tool_calls) for _, _, t in new],
        "tool_call_ids": [t.tool_call_id for _, _, t in new],
        "names": [t.name for _, _, t in new],
        "tokens": [t.tokens for _, _, t in new],
        "emphasized": [t.emphasized for _, _, t in new],
        "metadata": [json.dumps(t.metadata, ensure_ascii=False) for _, _, t in new],
        "created_at": [t.created_at for _, _, t in new],
    }

"""The owner of ``task_states`` and ``compression_events``: the compressor's reads
and its one atomic write (the turns and counters it touches go through
``stores/sessions.py``, their owner)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.audit import CompressionRecord
from app.compression.state import TaskState
from app.core.turns import TurnView
from app.stores import sessions
from app.stores.rows import turn_view


@dataclass(frozen=True)
class Snapshot:
    """What one compression starts from."""

    session_pk: int
    tenant_id: str
    user_pk: int
    version: int
    state: TaskState
    compressions: int
    live: list[tuple[int, str, int, TurnView]]  # (turn pk, external id, tokens, view)
    # The live user turns whose units are not stored yet (``turns.units``), by pk.
    unread: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Applied:
    event_id: int
    version: int


class StaleSnapshot(Exception):
    """The state moved on since the snapshot (another compression won); retry from scratch."""


# snapshot_head: the session and its current state.
SNAPSHOT_HEAD = text("""
    SELECT s.id, s.tenant_id, s.user_id, s.compressions,
           coalesce(ts.version, 0) AS version, ts.state
    FROM sessions s LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.id = :sid
""")

# live_turns: every turn not yet compacted, oldest first (and which are user turns whose
# units are to be read: sessions.UNREAD).
LIVE_TURNS = text(f"""
    SELECT id, external_id, seq, role, content, tool_calls, tool_call_id, name, tokens,
           emphasized, metadata, created_at, {sessions.UNREAD} AS unread
    FROM turns WHERE session_id = :sid AND NOT compacted ORDER BY seq
""")

# lock_state: the row every compression of this session serialises on.
LOCK_STATE = text("""
    SELECT s.id, s.turn_count, coalesce(ts.version, 0) AS version
    FROM sessions s LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.id = :sid
    FOR UPDATE OF s
""")

UPSERT_STATE = text("""
    INSERT INTO task_states (session_id, version, state, rendered, rendered_tokens, updated_at,
                             notice, notice_seq)
    VALUES (:sid, :version, :state, :rendered, :rendered_tokens, now(), :notice, :notice_seq)
    ON CONFLICT (session_id) DO UPDATE
    SET version = EXCLUDED.version, state = EXCLUDED.state, rendered = EXCLUDED.rendered,
        rendered_tokens = EXCLUDED.rendered_tokens, updated_at = now(),
        notice = EXCLUDED.notice, notice_seq = EXCLUDED.notice_seq
""")

INSERT_EVENT = text("""
    INSERT INTO compression_events (session_id, trigger, tier, state_version, turn_ids, turn_seqs,
        input_tokens, output_tokens, ratio, duration_ms, extractor, fallback_reason, units,
        rendered_state, change_summary, job_id, state, llm_prompt_tokens, llm_completion_tokens)
    VALUES (:sid, :trigger, :tier, :version, :turn_ids, :turn_seqs,
        :input_tokens, :output_tokens, :ratio, :duration_ms, :extractor, :fallback_reason,
        :units, :rendered_state, :change_summary, :job_id, :state, :llm_prompt_tokens,
        :llm_completion_tokens)
    RETURNING id
""")

STATE = text("SELECT state FROM task_states WHERE session_id = :sid")


async def stored_state(conn: AsyncConnection, *, session_pk: int) -> Any:
    """The session's task state as stored (JSON), or None before its first compression."""
    raw = (await conn.execute(STATE, {"sid": session_pk})).scalar()
    return raw or None


async def snapshot(conn: AsyncConnection, *, session_pk: int, rules: str) -> Snapshot | None:
    """The session as a compression starts from; ``unread``: the live user turns whose
    units are to be read by ``rules`` (sessions.UNREAD)."""
    head = (await conn.execute(SNAPSHOT_HEAD, {"sid": session_pk})).first()
    if head is None:
        return None
    raw_state = head.state if head.state is not None else {}
    rows = (await conn.execute(LIVE_TURNS, {"sid": session_pk, "rules": rules})).all()
    live = [(r.id, r.external_id, r.tokens, turn_view(r)) for r in rows]
    return Snapshot(
        session_pk=head.id,
        tenant_id=head.tenant_id,
        user_pk=head.user_id,
        version=head.version,
        state=TaskState.model_validate(raw_state or {}),
        compressions=head.compressions,
        live=live,
        unread=frozenset(r.id for r in rows if r.unread),
    )


async def apply_compression(
    conn: AsyncConnection,
    *,
    snap: Snapshot,
    state: TaskState,
    rendered: str,
    rendered_tokens: int,
    turn_pks: list[int],
    record: CompressionRecord,
    notice: str = "",
) -> Applied:
    """In the caller's transaction: new state version, event, turns compacted, counters.

    ``notice`` (the change notice) is kept with the session's last seq as of now,
    under the session's lock: the context shows it until a user turn comes later."""
    locked = (await conn.execute(LOCK_STATE, {"sid": snap.session_pk})).first()
    if locked is None or locked.version != snap.version:
        raise StaleSnapshot(f"state version moved from {snap.version}")
    version = snap.version + 1
    await conn.execute(
        UPSERT_STATE,
        {
            "sid": snap.session_pk,
            "version": version,
            "state": state.model_dump(mode="json"),
            "rendered": rendered,
            "rendered_tokens": rendered_tokens,
            "notice": notice or None,
            "notice_seq": locked.turn_count,
        },
    )
    event_id = (
        await conn.execute(
            INSERT_EVENT,
            {
                "sid": snap.session_pk,
                "version": version,
                "trigger": record.trigger,
                "tier": record.tier,
                "turn_ids": record.turn_ids,
                "turn_seqs": record.turn_seqs,
                "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens,
                "ratio": record.ratio,
                "duration_ms": record.duration_ms,
                "extractor": record.extractor,
                "fallback_reason": record.fallback_reason,
                "units": record.units,
                "rendered_state": record.rendered_state,
                "change_summary": record.change_summary,
                "job_id": record.job_id,
                "state": state.model_dump(mode="json"),
                "llm_prompt_tokens": record.llm_prompt_tokens,
                "llm_completion_tokens": record.llm_completion_tokens,
            },
        )
    ).scalar_one()
    tokens = await sessions.compact_turns(
        conn, session_pk=snap.session_pk, turn_pks=turn_pks, event_id=event_id
    )
    if len(tokens) != len(turn_pks):
        raise StaleSnapshot("some turns were compacted meanwhile")
    await sessions.count_compression(
        conn, session_pk=snap.session_pk, tokens=sum(tokens), n=len(tokens)
    )
    return Applied(event_id=event_id, version=version)


# restore_state: a new version of a state that exists (a miss pins archived turns).
RESTORE_STATE = text("""
    UPDATE task_states
    SET version = :version, state = :state, rendered = :rendered,
        rendered_tokens = :rendered_tokens, updated_at = now()
    WHERE session_id = :sid
""")


async def write_restored_state(
    conn: AsyncConnection,
    *,
    session_pk: int,
    version: int,
    state: TaskState,
    rendered: str,
    rendered_tokens: int,
) -> None:
    """In the caller's transaction, under the session's lock: the state with restored
    turns pinned. Its version moves, so a compression that started before fails its
    version check and runs again from this state."""
    await conn.execute(
        RESTORE_STATE,
        {
            "sid": session_pk,
            "version": version,
            "state": state.model_dump(mode="json"),
            "rendered": rendered,
            "rendered_tokens": rendered_tokens,
        },
    )


# notice_before: the change notice shows until a user turn comes after notice_seq; a pop
# gives the popped seq back to the allocator, so the mark moves below it.
NOTICE_BEFORE = text("""
    UPDATE task_states SET notice_seq = least(notice_seq, :seq - 1)
    WHERE session_id = :sid AND notice_seq >= :seq
""")


async def notice_before(conn: AsyncConnection, *, session_pk: int, seq: int) -> None:
    """Keep the change notice's mark below ``seq`` (the seq a pop freed)."""
    await conn.execute(NOTICE_BEFORE, {"sid": session_pk, "seq": seq})

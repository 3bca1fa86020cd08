"""Reads and deletes of sessions, their state and their archived turns."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.api.schemas import SessionOut, StateOut, TurnOut, TurnsPage
from app.core.errors import NotFound
from app.stores.rows import json_value

# session_summary: the session with its counters, state version and pending jobs.
SESSION_SUMMARY = text("""
    SELECT s.id, s.external_id, u.external_id AS user_external, s.created_at, s.turn_count,
           s.history_tokens, s.compressions, s.last_compression_at,
           coalesce(ts.version, 0) AS state_version,
           (SELECT count(*) FROM jobs j
             WHERE j.session_id = s.id AND j.status IN ('queued', 'running')) AS pending_jobs
    FROM sessions s
    JOIN users u ON u.id = s.user_id
    LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.tenant_id = :tenant AND s.external_id = :session
""")

SESSION_PK = text("""
    SELECT id FROM sessions WHERE tenant_id = :tenant AND external_id = :session
""")

STATE = text("""
    SELECT version, state, rendered, updated_at FROM task_states WHERE session_id = :sid
""")

# turns_page: the archive, oldest first, keyset-paginated by seq.
TURNS_PAGE = text("""
    SELECT external_id, seq, role, content, name, tool_calls, tool_call_id, tokens, emphasized,
           metadata, created_at, compacted
    FROM turns
    WHERE session_id = :sid AND seq > :after_seq
    ORDER BY seq
    LIMIT :limit
""")

DELETE_SESSION = text("""
    DELETE FROM sessions WHERE tenant_id = :tenant AND external_id = :session RETURNING id
""")


async def session_pk(conn: AsyncConnection, *, tenant: str, session: str) -> int:
    pk = (await conn.execute(SESSION_PK, {"tenant": tenant, "session": session})).scalar()
    if pk is None:
        raise NotFound(f"session {session!r} not found")
    return int(pk)


async def get_session(conn: AsyncConnection, *, tenant: str, session: str) -> SessionOut:
    row = (await conn.execute(SESSION_SUMMARY, {"tenant": tenant, "session": session})).first()
    if row is None:
        raise NotFound(f"session {session!r} not found")
    return SessionOut(
        session_id=row.external_id,
        user_id=row.user_external,
        created_at=row.created_at,
        turn_count=row.turn_count,
        history_tokens=row.history_tokens,
        state_version=row.state_version,
        pending_jobs=row.pending_jobs,
        last_compression_at=row.last_compression_at,
        compressions=row.compressions,
    )


async def get_state(conn: AsyncConnection, *, tenant: str, session: str) -> StateOut:
    sid = await session_pk(conn, tenant=tenant, session=session)
    row = (await conn.execute(STATE, {"sid": sid})).first()
    if row is None:
        return StateOut(version=0, state={}, updated_at=None, rendered="")
    return StateOut(
        version=row.version,
        state=json_value(row.state),
        updated_at=row.updated_at,
        rendered=row.rendered,
    )


async def list_turns(
    conn: AsyncConnection, *, tenant: str, session: str, after_seq: int, limit: int
) -> TurnsPage:
    sid = await session_pk(conn, tenant=tenant, session=session)
    rows = (
        await conn.execute(TURNS_PAGE, {"sid": sid, "after_seq": after_seq, "limit": limit + 1})
    ).all()
    more = len(rows) > limit
    rows = rows[:limit]
    turns = [
        TurnOut(
            id=r.external_id,
            seq=r.seq,
            role=r.role,
            content=r.content,
            name=r.name,
            tool_calls=json_value(r.tool_calls),
            tool_call_id=r.tool_call_id,
            tokens=r.tokens,
            emphasized=r.emphasized,
            metadata=json_value(r.metadata),
            created_at=r.created_at,
            compacted=r.compacted,
        )
        for r in rows
    ]
    return TurnsPage(turns=turns, next_after_seq=turns[-1].seq if more and turns else None)


async def delete_session(conn: AsyncConnection, *, tenant: str, session: str) -> None:
    if (await conn.execute(DELETE_SESSION, {"tenant": tenant, "session": session})).first() is None:
        raise NotFound(f"session {session!r} not found")

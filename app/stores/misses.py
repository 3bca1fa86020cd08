"""Misses: the samples of what compression took away that an agent needed later.

Also the reads a miss needs (the session under its lock, its compacted turns).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.state import TaskState
from app.core.errors import NotFound
from app.core.turns import TurnView
from app.stores.rows import turn_view


@dataclass(frozen=True)
class LockedSession:
    pk: int
    tenant_id: str
    version: int
    state: TaskState


# lock_session_state: the session (by tenant and id) and its state, under the row
# lock every compression of it takes, so a restore and a compression serialise.
LOCK_SESSION_STATE = text("""
    SELECT s.id, s.tenant_id, coalesce(ts.version, 0) AS version, ts.state
    FROM sessions s LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.tenant_id = :tenant AND s.external_id = :session
    FOR UPDATE OF s
""")

# compacted_turns: the newest compacted turns of a session, newest first.
COMPACTED_TURNS = text("""
    SELECT seq, role, content, tool_calls, tool_call_id, name
    FROM turns WHERE session_id = :sid AND compacted
    ORDER BY seq DESC LIMIT :limit
""")

INSERT_MISS = text("""
    INSERT INTO misses (tenant_id, session_id, detection, needed, restored_seqs, state, turns)
    VALUES (:tenant, :sid, :detection, :needed, :restored, :state, :turns)
    RETURNING id
""")

# export_misses: samples in id order, one page after a cursor, optionally one tenant's.
EXPORT_MISSES = text("""
    SELECT m.id, m.tenant_id, s.external_id AS session_id, m.created_at, m.detection,
           m.needed, m.restored_seqs, m.state, m.turns
    FROM misses m JOIN sessions s ON s.id = m.session_id
    WHERE m.id > :after AND (CAST(:tenant AS text) IS NULL OR m.tenant_id = :tenant)
    ORDER BY m.id
    LIMIT :limit
""")


async def lock_session(conn: AsyncConnection, *, tenant: str, session: str) -> LockedSession:
    row = (await conn.execute(LOCK_SESSION_STATE, {"tenant": tenant, "session": session})).first()
    if row is None:
        raise NotFound(f"session {session!r} not found")
    raw = row.state
    return LockedSession(
        pk=row.id,
        tenant_id=row.tenant_id,
        version=row.version,
        state=TaskState.model_validate(raw or {}),
    )


async def compacted_turns(
    conn: AsyncConnection, *, session_pk: int, limit: int = 2000
) -> list[TurnView]:
    """The session's compacted turns, oldest first (at most the newest ``limit``)."""
    rows = await conn.execute(COMPACTED_TURNS, {"sid": session_pk, "limit": limit})
    return [turn_view(r) for r in reversed(rows.all())]


async def insert_miss(
    conn: AsyncConnection,
    *,
    tenant: str,
    session_pk: int,
    detection: str,
    needed: str,
    restored_seqs: list[int],
    state: TaskState,
    turns: list[dict[str, Any]],
) -> int:
    params = {
        "tenant": tenant,
        "sid": session_pk,
        "detection": detection,
        "needed": needed,
        "restored": restored_seqs,
        "state": state.model_dump(mode="json", exclude={"renderings"}),
        "turns": turns,
    }
    return int((await conn.execute(INSERT_MISS, params)).scalar_one())


async def export(
    conn: AsyncConnection, *, tenant: str | None, page: int = 500
) -> AsyncIterator[dict[str, Any]]:
    """Every sample, oldest first, as JSON-ready dicts (read page by page)."""
    after = 0
    while True:
        rows = (
            await conn.execute(EXPORT_MISSES, {"after": after, "tenant": tenant, "limit": page})
        ).all()
        for r in rows:
            yield {
                "id": r.id,
                "tenant": r.tenant_id,
                "session_id": r.session_id,
                "created_at": r.created_at.isoformat(),
                "detection": r.detection,
                "needed": r.needed,
                "restored_seqs": r.restored_seqs,
                "state": r.state,
                "turns": r.turns,
            }
        if len(rows) < page:
            return
        after = rows[-1].id

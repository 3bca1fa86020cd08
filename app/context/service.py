"""Read-only assembly of a session's context: precomputed state + recent raw turns.

Never calls an LLM and never writes: the worker keeps ``task_states.rendered``
current, this only reads it.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.api.schemas import ContextBlock, ContextOut
from app.context.pack import Block, RecentTurn, as_text, pack
from app.core.errors import NotFound
from app.core.tokens import count_tokens

# How many live turns one context read fetches at most. The budget is usually
# full long before; a session that has not been compressed yet is the exception.
RECENT_FETCH_LIMIT = 400

# context_head: the session, its owner and its rendered state, in one round trip.
CONTEXT_HEAD = text("""
    SELECT s.id, u.external_id AS user_external, s.total_tokens,
           coalesce(ts.version, 0) AS version,
           coalesce(ts.rendered, '') AS rendered
    FROM sessions s
    JOIN users u ON u.id = s.user_id
    LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.tenant_id = :tenant AND s.external_id = :session
""")

# recent_turns: the newest live (uncompacted) turns, newest first; compacted turns
# are represented by the task state, never twice.
RECENT_TURNS = text("""
    SELECT role, content, tool_calls, tool_call_id, name, tokens
    FROM turns
    WHERE session_id = :sid AND NOT compacted
    ORDER BY seq DESC
    LIMIT :limit
""")


def _message(row: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": row.role, "content": row.content}
    if row.tool_calls is not None:
        calls = row.tool_calls
        message["tool_calls"] = json.loads(calls) if isinstance(calls, str) else calls
    if row.tool_call_id is not None:
        message["tool_call_id"] = row.tool_call_id
    if row.name is not None:
        message["name"] = row.name
    return message


async def build_context(
    conn: AsyncConnection, *, tenant: str, session: str, max_tokens: int
) -> ContextOut:
    head = (await conn.execute(CONTEXT_HEAD, {"tenant": tenant, "session": session})).first()
    if head is None:
        raise NotFound(f"session {session!r} not found")
    rows = (await conn.execute(RECENT_TURNS, {"sid": head.id, "limit": RECENT_FETCH_LIMIT})).all()
    recent = [RecentTurn(message=_message(r), tokens=r.tokens) for r in reversed(rows)]
    blocks = [Block("task_state", head.rendered)]
    packed = pack(blocks=blocks, recent=recent, max_tokens=max_tokens, count=count_tokens)
    return ContextOut(
        session_id=session,
        user_id=head.user_external,
        state_version=head.version,
        messages=packed.messages,
        text=as_text(packed.messages),
        blocks=[ContextBlock(kind=k, tokens=t) for k, t in packed.blocks],
        tokens=packed.tokens,
        max_tokens=max_tokens,
        full_history_tokens=head.total_tokens,
    )

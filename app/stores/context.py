"""The context read: one statement, one snapshot, one round trip, straight through asyncpg.

It spans the session, its owner, its rendered state and its newest live turns; it
writes nothing, so it lives here rather than with any one table's owner.
"""

from __future__ import annotations

import asyncpg

# context_read: the session, its owner, its rendered state and its newest live
# (uncompacted) turns as JSON, newest first. Compacted turns are represented by
# the task state, never twice.
CONTEXT_READ = """
    SELECT s.id, s.user_id, u.external_id AS user_external, s.total_tokens, s.last_user_seq,
           EXISTS (SELECT 1 FROM memories m
                    WHERE m.user_id = s.user_id AND m.superseded_by IS NULL) AS has_memories,
           coalesce(ts.version, 0) AS version, coalesce(ts.rendered, '') AS rendered,
           coalesce(ts.state->'renderings', '[]') AS renderings,
           (SELECT coalesce(json_agg(t), '[]')
              FROM (SELECT seq, role, content, tool_calls, tool_call_id, name, tokens
                      FROM turns
                     WHERE session_id = s.id AND NOT compacted
                     ORDER BY seq DESC
                     LIMIT $3 OFFSET $4) t) AS turns
    FROM sessions s
    JOIN users u ON u.id = s.user_id
    LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.tenant_id = $1 AND s.external_id = $2
"""


async def read_context(
    db: asyncpg.Connection, *, tenant: str, session: str, limit: int, offset: int
) -> asyncpg.Record | None:
    """The session's head and its live turns ``offset`` … ``offset + limit`` newest first."""
    return await db.fetchrow(CONTEXT_READ, tenant, session, limit, offset)

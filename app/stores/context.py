"""The context read: one statement, one snapshot, one round trip, straight through asyncpg.

It spans the session, its owner, its rendered state and its newest live turns; it
writes nothing, so it lives here rather than with any one table's owner.
"""

from __future__ import annotations

import contextlib
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.stores.engine import CONNECTION_LOST, autocommit, driver_checkout, driver_connection


class ContextConnection:
    """The context read's connection: a driver connection from ``engine``'s pool
    (``driver_checkout``: no SQLAlchemy ``Connection`` around it, whose checkout,
    autocommit option and return cost ~0.1 ms of CPU a read, three times the pool's
    own). When the memory block needs a SQLAlchemy connection (its search),
    ``sqlalchemy`` trades the driver connection for one: one connection held at a time,
    so reads never wait on each other for a second one. A connection that is gone is
    invalidated either way."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._checkout: contextlib.AbstractAsyncContextManager[asyncpg.Connection] | None = None
        self._conn: AsyncConnection | None = None
        self._stack = contextlib.AsyncExitStack()
        self.db: asyncpg.Connection

    async def __aenter__(self) -> ContextConnection:
        self._checkout = driver_checkout(self._engine)
        self.db = await self._checkout.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        checkout, self._checkout = self._checkout, None
        if checkout is not None:
            await checkout.__aexit__(*exc)
            return
        if exc[0] is not None and issubclass(exc[0], CONNECTION_LOST) and self._conn is not None:
            # Read through the driver, so the pool must be told the connection is gone.
            await self._conn.invalidate()
        await self._stack.aclose()

    async def sqlalchemy(self) -> tuple[AsyncConnection, asyncpg.Connection]:
        """An autocommit SQLAlchemy connection, and the driver connection under it
        (what the read goes on with), in place of the driver connection held."""
        checkout, self._checkout = self._checkout, None
        if checkout is not None:
            await checkout.__aexit__(None, None, None)
            self._conn = await self._stack.enter_async_context(autocommit(self._engine))
            self.db = await driver_connection(self._conn)
        assert self._conn is not None
        return self._conn, self.db


# context_read: the session, its owner, its rendered state and its newest live
# (uncompacted) turns, newest first, each with the units stored with it (JSON text, by
# ingest or the worker; null: not read yet), and the live user turns older than that
# page (in the same snapshot: no second round trip). The turns come as arrays of rows
# (``TURN``, ``OLDER_TURN``), which Postgres sends in binary and the driver decodes to
# tuples: as ``json_agg`` they were JSON text Postgres escaped and the API parsed
# (about a fifth of the statement's CPU in Postgres, 45 us a read). Compacted turns are
# represented by the task state, never twice. ``OFFSET 0`` keeps ``has_memories`` a
# probe of the user's rows: without it Postgres may answer the EXISTS by hashing every
# live memory of every user, and a generic plan made while the table held a handful of
# rows did so on each read once it held thousands (asyncpg prepares the statement once
# per connection; the plan stays until an ANALYZE).
CONTEXT_READ = """
    SELECT s.id, s.user_id, u.external_id AS user_external, s.total_tokens, s.last_user_seq,
           EXISTS (SELECT 1 FROM memories m
                    WHERE m.user_id = s.user_id AND m.superseded_by IS NULL
                    OFFSET 0) AS has_memories,
           coalesce(ts.version, 0) AS version, coalesce(ts.rendered, '') AS rendered,
           coalesce(ts.state->'renderings', '[]') AS renderings,
           -- the state's open questions: the first live user reply may answer one
           coalesce(jsonb_path_query_array(ts.state, '$.pending[*] ? (@.status == "pending")'),
                    '[]') AS open_pending,
           -- the change notice, while no user turn came after the compression
           CASE WHEN NOT EXISTS (SELECT 1 FROM turns n
                                  WHERE n.session_id = s.id AND n.seq > ts.notice_seq
                                    AND n.role = 'user')
                THEN ts.notice END AS notice,
           -- the shared state of the session's task, rendered by its last contribution
           coalesce(tk.rendered, '') AS shared, coalesce(tk.renderings, '[]') AS shared_tiers,
           -- the user's sessions of other agents: their memories are theirs
           (SELECT json_build_object('pks', coalesce(array_agg(o.id), '{}'),
                                     'ids', coalesce(array_agg(o.external_id), '{}'))
              FROM sessions o
             WHERE s.agent IS NOT NULL AND o.user_id = s.user_id
               AND o.agent IS NOT NULL AND o.agent <> s.agent) AS hidden,
           ARRAY(SELECT ROW(seq, role, content, tool_calls, tool_call_id, name, tokens,
                            units::text)
                   FROM turns
                  WHERE session_id = s.id AND NOT compacted
                  ORDER BY seq DESC
                  LIMIT $3 OFFSET $4) AS turns,
           -- when that page is full, up to $5 live user turns older than it, newest
           -- first: the read checks them for what its task state does not show yet
           ARRAY(SELECT ROW(seq, content, units::text)
                   FROM turns
                  WHERE session_id = s.id AND NOT compacted AND role = 'user'
                    AND seq < (SELECT seq FROM turns
                                WHERE session_id = s.id AND NOT compacted
                                ORDER BY seq DESC
                                LIMIT 1 OFFSET $3 + $4 - 1)
                  ORDER BY seq DESC
                  LIMIT $5) AS older_user_turns
    FROM sessions s
    JOIN users u ON u.id = s.user_id
    LEFT JOIN task_states ts ON ts.session_id = s.id
    LEFT JOIN tasks tk ON tk.id = s.task_id
    WHERE s.tenant_id = $1 AND s.external_id = $2
"""


# A turn of ``turns``, as a tuple: seq, role, content, tool_calls (decoded), tool_call_id,
# name, tokens, units (the stored record's text). One of ``older_user_turns``: seq,
# content, units (as ``read_live_user_turns``'s rows, which are read by position too).
TURN = ("seq", "role", "content", "tool_calls", "tool_call_id", "name", "tokens", "units")
OLDER_TURN = ("seq", "content", "units")
SEQ, ROLE, CONTENT, TOOL_CALLS, TOOL_CALL_ID, NAME, TOKENS, UNITS = range(len(TURN))
OLDER_CONTENT, OLDER_UNITS = 1, 2


async def read_context(
    db: asyncpg.Connection,
    *,
    tenant: str,
    session: str,
    limit: int,
    offset: int,
    older_users: int = 0,
) -> asyncpg.Record | None:
    """The session's head and its live turns ``offset`` … ``offset + limit`` newest first;
    when there are that many, up to ``older_users`` live user turns older than them."""
    return await db.fetchrow(CONTEXT_READ, tenant, session, limit, offset, older_users)


# live_user_turns: a session's live user turns older than a seq, newest first: the
# context read checks them for changes its task state does not show yet (with their
# stored units, as above).
LIVE_USER_TURNS = """
    SELECT t.seq, t.content, t.units::text AS units
      FROM turns t
      JOIN sessions s ON s.id = t.session_id
     WHERE s.tenant_id = $1 AND t.session_id = $2 AND NOT t.compacted AND t.seq < $3
       AND t.role = 'user'
     ORDER BY t.seq DESC
     LIMIT $4
"""


async def read_live_user_turns(
    db: asyncpg.Connection, *, tenant: str, session_pk: int, before_seq: int, limit: int
) -> list[asyncpg.Record]:
    """Live user turns of the session older than ``before_seq``, at most ``limit``."""
    rows: list[asyncpg.Record] = await db.fetch(
        LIVE_USER_TURNS, tenant, session_pk, before_seq, limit
    )
    return rows


# state_in_force: what the session's task state (the version the context read
# rendered) holds in force that a live turn may withdraw: its active rules,
# preferences and decisions, its open next steps. Read only when a live turn
# withdraws something; no row when a compression replaced that version meanwhile.
STATE_IN_FORCE = """
    SELECT jsonb_build_object(
             'constraints',
             jsonb_path_query_array(ts.state, '$.constraints[*] ? (@.status == "active")'),
             'todos', jsonb_path_query_array(ts.state, '$.todos[*] ? (@.status == "open")'),
             'preferences',
             jsonb_path_query_array(ts.state, '$.preferences[*] ? (@.status == "active")'),
             'decisions',
             jsonb_path_query_array(ts.state, '$.decisions[*] ? (@.status == "active")'))
      FROM task_states ts
      JOIN sessions s ON s.id = ts.session_id
     WHERE s.tenant_id = $1 AND ts.session_id = $2 AND ts.version = $3
"""


async def read_state_in_force(
    db: asyncpg.Connection, *, tenant: str, session_pk: int, version: int
) -> dict[str, list[dict[str, object]]] | None:
    """The items of the state ``version`` in force, by pool; None if it was replaced."""
    found: dict[str, list[dict[str, object]]] | None = await db.fetchval(
        STATE_IN_FORCE, tenant, session_pk, version
    )
    return found

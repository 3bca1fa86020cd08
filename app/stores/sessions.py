"""The owner of ``users``, ``sessions`` and ``turns``: every statement that writes them.

A session row carries the counters the trigger reads (``turn_count`` is the seq
allocator, ``history_tokens`` and ``live_turns`` the live history) and the marks
of the memory jobs (``episode_seq``, ``promoted_seq``, the newest user turn's
embedding). Ingest appends turns and bumps the counters in one statement; a
compression compacts turns and takes their tokens off; the repair job recounts.
Reads that serve one use case (the context read, the compressor's snapshot) live
in that use case's store; the reads here are the session's own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.errors import NotFound
from app.core.turns import PreparedTurn, TurnView
from app.stores import queue
from app.stores.rows import turn_view

# ------------------------------------------------------------------------- users

USER_PK = text("SELECT id FROM users WHERE tenant_id = :tenant AND external_id = :user")
USER_PK_ON_DRIVER = "SELECT id FROM users WHERE tenant_id = $1 AND external_id = $2"

UPSERT_USER = text("""
    INSERT INTO users (tenant_id, external_id) VALUES (:tenant, :user)
    ON CONFLICT (tenant_id, external_id) DO UPDATE SET external_id = EXCLUDED.external_id
    RETURNING id
""")

DELETE_USER = text(
    "DELETE FROM users WHERE tenant_id = :tenant AND external_id = :user RETURNING id"
)


async def user_pk(conn: AsyncConnection, *, tenant: str, user: str) -> int | None:
    found = (await conn.execute(USER_PK, {"tenant": tenant, "user": user})).scalar()
    return None if found is None else int(found)


async def user_pk_on_driver(db: asyncpg.Connection, *, tenant: str, user: str) -> int | None:
    """``user_pk`` on the driver connection, for a read path that runs its other
    statements there (a memory search): no SQLAlchemy layer around one lookup."""
    found = await db.fetchval(USER_PK_ON_DRIVER, tenant, user)
    return None if found is None else int(found)


async def ensure_user(conn: AsyncConnection, *, tenant: str, user: str) -> int:
    return int((await conn.execute(UPSERT_USER, {"tenant": tenant, "user": user})).scalar_one())


async def delete_user(conn: AsyncConnection, *, tenant: str, user: str) -> bool:
    """Delete the user and, by cascade, their sessions, turns and memories."""
    deleted = (await conn.execute(DELETE_USER, {"tenant": tenant, "user": user})).first()
    return deleted is not None


# ---------------------------------------------------------------------- append

# lock_session: serialises posts to one session for the rest of the transaction, and
# reads the turns already stored under the post's client ids in the same round trip.
# That list comes from the statement's snapshot, taken before the lock was granted: if
# another post committed while this one waited, the locked row is that post's newer
# version (a new xmin) and its turns are not in the list. ``known_current`` says the
# snapshot saw the row that was locked (every append and pop rewrites the row); when it did
# not, ``lock_session`` reads the known turns again.
LOCK_SESSION = text("""
    SELECT s.id, u.external_id AS user_external, s.turn_count, s.history_tokens,
           s.live_turns, s.compressions,
           (SELECT json_agg(json_build_array(t.external_id, t.seq, t.tokens))
              FROM turns t
             WHERE t.session_id = s.id
               AND t.external_id = ANY(CAST(:ids AS text[]))) AS known,
           s.xmin = (SELECT o.xmin FROM sessions o WHERE o.id = s.id) AS known_current
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

# append_turns: the whole batch in one statement, each user turn with the units ingest
# read from it (NULL: the worker reads them), and the session's counters with it
# (turn_count is the seq allocator; history_tokens and live_turns feed the trigger),
# and the job the batch causes, if any (a user turn's index_session).
WANTED = "(SELECT 1 WHERE CAST(:job_wanted AS boolean)) AS wanted"
APPEND_TURNS = text(f"""
    WITH inserted AS (
        INSERT INTO turns (session_id, seq, external_id, role, content, tool_calls,
                           tool_call_id, name, tokens, emphasized, metadata, created_at, units)
        SELECT :sid, t.seq, t.external_id, t.role, t.content, CAST(t.tool_calls AS jsonb),
               t.tool_call_id, t.name, t.tokens, t.emphasized, CAST(t.metadata AS jsonb),
               coalesce(t.created_at, now()), CAST(t.units AS jsonb)
        FROM unnest(CAST(:seqs AS int[]), CAST(:external_ids AS text[]),
                    CAST(:roles AS text[]), CAST(:contents AS text[]),
                    CAST(:tool_calls AS text[]), CAST(:tool_call_ids AS text[]),
                    CAST(:names AS text[]), CAST(:tokens AS int[]), CAST(:emphasized AS bool[]),
                    CAST(:metadata AS text[]), CAST(:created_at AS timestamptz[]),
                    CAST(:units AS text[]))
             AS t(seq, external_id, role, content, tool_calls, tool_call_id, name, tokens,
                  emphasized, metadata, created_at, units)
        RETURNING 1),
    job AS ({queue.enqueue_for(WANTED, session_id="CAST(:sid AS bigint)")}),
    bumped AS (
        UPDATE sessions SET turn_count = turn_count + :n,
                            live_turns = live_turns + :n,
                            history_tokens = history_tokens + :added_tokens,
                            total_tokens = total_tokens + :added_tokens,
                            updated_at = now()
        WHERE id = :sid AND tenant_id = :tenant
        RETURNING turn_count, history_tokens, live_turns)
    SELECT turn_count, history_tokens, live_turns, {queue.notify_added("job")} AS jobs_added
    FROM bumped
""")


@dataclass(frozen=True)
class KnownTurn:
    external_id: str
    seq: int
    tokens: int


@dataclass(frozen=True)
class Locked:
    """A session row locked for an append, with its owner and counters, and the turns
    already stored under the client ids the post carries."""

    id: int
    user_external: str
    turn_count: int
    history_tokens: int
    live_turns: int
    compressions: int
    known: list[KnownTurn]


@dataclass(frozen=True)
class Counters:
    """A session's counters right after an append."""

    turn_count: int
    history_tokens: int
    live_turns: int


async def lock_session(
    conn: AsyncConnection, *, tenant: str, session: str, client_ids: Sequence[str] = ()
) -> Locked | None:
    ids = list(client_ids)
    row = (
        await conn.execute(LOCK_SESSION, {"tenant": tenant, "session": session, "ids": ids})
    ).first()
    if row is None:
        return None
    if not ids:
        known = []
    elif row.known_current:
        known = [KnownTurn(external_id=e, seq=q, tokens=n) for e, q, n in row.known or ()]
    else:  # another post committed while this one waited for the lock
        known = await known_turns(conn, session_pk=row.id, client_ids=ids)
    return Locked(
        id=row.id,
        user_external=row.user_external,
        turn_count=row.turn_count,
        history_tokens=row.history_tokens,
        live_turns=row.live_turns,
        compressions=row.compressions,
        known=known,
    )


async def create_session(conn: AsyncConnection, *, tenant: str, session: str, user: str) -> None:
    await conn.execute(CREATE_SESSION, {"tenant": tenant, "session": session, "user": user})


async def known_turns(
    conn: AsyncConnection, *, session_pk: int, client_ids: list[str]
) -> list[KnownTurn]:
    rows = await conn.execute(KNOWN_TURNS, {"sid": session_pk, "ids": client_ids})
    return [KnownTurn(external_id=r.external_id, seq=r.seq, tokens=r.tokens) for r in rows]


async def append_turns(
    conn: AsyncConnection,
    *,
    tenant: str,
    session_pk: int,
    new: Sequence[tuple[int, str, PreparedTurn]],
    units: Sequence[str | None] | None = None,
    job: queue.JobWanted | None = None,
) -> Counters:
    """Insert ``new`` (seq, external id, turn), each with its ``units`` record (JSON
    text; None: not read), bump the session's counters and enqueue ``job`` for the
    session (unless an equal job already waits)."""
    enqueue = queue.within_params(
        tenant_id=tenant,
        kind=job.kind if job else "",
        max_attempts=job.max_attempts if job else 1,
        delay_s=job.delay_s if job else 0.0,
    )
    params = {**_columns(session_pk, new), **enqueue, "job_wanted": job is not None}
    params["units"] = list(units) if units is not None else [None] * len(new)
    params["tenant"] = tenant
    row = (await conn.execute(APPEND_TURNS, params)).one()
    return Counters(
        turn_count=row.turn_count, history_tokens=row.history_tokens, live_turns=row.live_turns
    )


def _columns(sid: int, new: Sequence[tuple[int, str, PreparedTurn]]) -> dict[str, Any]:
    # JSON goes in as text[] (cast per row in SQL): bound as jsonb[], a list value
    # would be read by the driver as another dimension of the array.
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


# --------------------------------------------------------------- compaction

# lock_for_compaction: taken before a "compress now" job insert, in the order ingest
# takes its locks (the session row, then the job). Otherwise a post holding the row
# and inserting its own job, and this insert waiting on the row for its foreign key,
# deadlock.
LOCK_FOR_COMPACTION = text("SELECT 1 FROM sessions WHERE id = :sid FOR UPDATE")

# compact_turns: mark the taken turns; only those still live (a retried job is a no-op).
COMPACT_TURNS = text("""
    UPDATE turns SET compacted = true, event_id = :event_id
    WHERE session_id = :sid AND id = ANY(CAST(:ids AS bigint[])) AND NOT compacted
    RETURNING tokens
""")

BUMP_SESSION = text("""
    UPDATE sessions SET history_tokens = greatest(history_tokens - :tokens, 0),
                        live_turns = greatest(live_turns - :n, 0),
                        compressions = compressions + 1, last_compression_at = now()
    WHERE id = :sid
""")

# recount_tokens: recompute a session's live-history counters from its turns.
RECOUNT = text("""
    UPDATE sessions s SET
        history_tokens = coalesce(
            (SELECT sum(tokens) FROM turns t WHERE t.session_id = s.id AND NOT t.compacted), 0),
        live_turns = (SELECT count(*) FROM turns t WHERE t.session_id = s.id AND NOT t.compacted)
    WHERE s.id = :sid
""")

# recent_live: the newest live turns, newest first (the batch just inserted included).
RECENT_LIVE = text("""
    SELECT seq, role, content, tool_calls, tool_call_id, name, emphasized
    FROM turns WHERE session_id = :sid AND NOT compacted
    ORDER BY seq DESC LIMIT :k
""")


async def lock_for_compaction(conn: AsyncConnection, *, session_pk: int) -> None:
    await conn.execute(LOCK_FOR_COMPACTION, {"sid": session_pk})


async def compact_turns(
    conn: AsyncConnection, *, session_pk: int, turn_pks: list[int], event_id: int
) -> list[int]:
    """Mark ``turn_pks`` compacted by ``event_id``; the tokens of those that were live."""
    rows = await conn.execute(
        COMPACT_TURNS, {"sid": session_pk, "ids": turn_pks, "event_id": event_id}
    )
    return [r.tokens for r in rows]


async def count_compression(conn: AsyncConnection, *, session_pk: int, tokens: int, n: int) -> None:
    """Take ``n`` compacted turns of ``tokens`` off the live history; one more compression."""
    await conn.execute(BUMP_SESSION, {"sid": session_pk, "tokens": tokens, "n": n})


async def recount(conn: AsyncConnection, *, session_pk: int | None) -> None:
    await conn.execute(RECOUNT, {"sid": session_pk})


async def recent_live_turns(conn: AsyncConnection, *, session_pk: int, k: int) -> list[TurnView]:
    """The newest ``k`` live turns, oldest first."""
    rows = (await conn.execute(RECENT_LIVE, {"sid": session_pk, "k": k})).all()
    return [turn_view(r) for r in reversed(rows)]


# ------------------------------------------------------------------------ pop

# newest_turn: the session's newest turn, what a pop would remove.
NEWEST_TURN = text("""
    SELECT id AS pk, external_id, seq, role, content, name, tool_calls, tool_call_id, tokens,
           emphasized, metadata, created_at, compacted, event_id
    FROM turns WHERE session_id = :sid
    ORDER BY seq DESC LIMIT 1
""")

# remove_newest: delete the newest turn and take it off every counter and mark, under the
# session's lock. Its seq becomes the allocator's again (seqs stay gapless); the marks
# that point at it or past it (the embedded user turn, the indexing and promotion marks)
# move back, so the next turn posted at that seq is embedded and indexed afresh.
REMOVE_NEWEST = text("""
    WITH gone AS (DELETE FROM turns WHERE id = :turn_pk AND session_id = :sid
                  RETURNING seq, tokens)
    UPDATE sessions s SET
        turn_count = gone.seq - 1,
        live_turns = greatest(s.live_turns - 1, 0),
        history_tokens = greatest(s.history_tokens - gone.tokens, 0),
        total_tokens = greatest(s.total_tokens - gone.tokens, 0),
        last_user_seq = CASE WHEN s.last_user_seq >= gone.seq THEN NULL ELSE s.last_user_seq END,
        last_user_embedding = CASE WHEN s.last_user_seq >= gone.seq THEN NULL
                                   ELSE s.last_user_embedding END,
        episode_seq = least(s.episode_seq, :index_mark, gone.seq - 1),
        promoted_seq = least(s.promoted_seq, gone.seq - 1),
        updated_at = now()
    FROM gone
    WHERE s.id = :sid AND s.tenant_id = :tenant
    RETURNING s.turn_count, s.history_tokens, s.live_turns, s.episode_seq
""")

# index_read_current: lock the session (posts and pops serialise on its row) and tell
# whether what an index run read is still current: the newest turn it read is still
# there and the indexing mark it started from has not moved (a pop may lower it).
INDEX_READ_CURRENT = text("""
    SELECT s.episode_seq = :episode_seq
           AND EXISTS (SELECT 1 FROM turns t WHERE t.id = :turn_pk AND t.session_id = s.id)
    FROM sessions s WHERE s.id = :sid AND s.tenant_id = :tenant
    FOR UPDATE OF s
""")


@dataclass(frozen=True)
class NewestTurn:
    pk: int
    turn: StoredTurn
    event_id: int | None  # the compression that took it, when compacted


@dataclass(frozen=True)
class AfterPop:
    """A session's counters and indexing mark right after a pop."""

    turn_count: int
    history_tokens: int
    live_turns: int
    episode_seq: int


async def newest_turn(conn: AsyncConnection, *, session_pk: int) -> NewestTurn | None:
    row = (await conn.execute(NEWEST_TURN, {"sid": session_pk})).first()
    if row is None:
        return None
    return NewestTurn(pk=row.pk, turn=_stored(row), event_id=row.event_id)


async def remove_newest(
    conn: AsyncConnection, *, tenant: str, session_pk: int, turn_pk: int, index_mark: int
) -> AfterPop:
    """Delete the newest turn ``turn_pk`` (the caller holds the session's lock, see
    ``lock_session``); indexing restarts after ``index_mark`` at the latest."""
    row = (
        await conn.execute(
            REMOVE_NEWEST,
            {"tenant": tenant, "sid": session_pk, "turn_pk": turn_pk, "index_mark": index_mark},
        )
    ).one()
    return AfterPop(**row._mapping)


@dataclass(frozen=True)
class IndexRead:
    """What an index run read of one session: from mark ``episode_seq``, through the
    turn with row id ``turn_pk``."""

    session_pk: int
    turn_pk: int
    episode_seq: int


async def index_read_current(conn: AsyncConnection, *, tenant: str, read: IndexRead) -> bool:
    """Lock the session's row for the rest of the transaction; is an index run's read
    (newest turn ``turn_pk``, from mark ``episode_seq``) still current?"""
    params = {
        "tenant": tenant,
        "sid": read.session_pk,
        "turn_pk": read.turn_pk,
        "episode_seq": read.episode_seq,
    }
    return bool((await conn.execute(INDEX_READ_CURRENT, params)).scalar())


# ------------------------------------------------------------- memory marks

# index_head: what indexing starts from: the session, its marks and its goal.
INDEX_HEAD = text("""
    SELECT s.id, s.tenant_id, s.external_id, s.user_id, s.episode_seq, s.last_user_seq,
           s.live_turns, s.turn_count, ts.state -> 'goal' ->> 'text' AS goal
    FROM sessions s LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.id = :sid
""")

# A user turn whose units are to be read: none stored, or stored by other rules than
# :rules (``live_notes.RULES_STAMP``; an upgrade changed them). Such a record is never
# trusted by a read, which reads the turn from its text instead, once per process; the
# next job that reads the turn stores its record again.
UNREAD = """role = 'user' AND content IS NOT NULL
           AND (units IS NULL OR units->>'rules' IS DISTINCT FROM :rules)"""

# The turns not yet covered by a closed episode, oldest first, and which of them are
# user turns whose units are to be read (UNREAD).
UNINDEXED_TURNS = text(f"""
    SELECT id, seq, role, content, tool_calls, tool_call_id, name, metadata, created_at,
           {UNREAD} AS unread
    FROM turns WHERE session_id = :sid AND seq > :after ORDER BY seq
""")

# set_turn_units: what each user turn states (JSON text by row id, made by :rules),
# stored once; a turn popped since the read is gone, and one another run stored first
# by the same rules keeps its record.
SET_TURN_UNITS = text("""
    UPDATE turns t SET units = CAST(u.units AS jsonb)
      FROM unnest(CAST(:ids AS bigint[]), CAST(:units AS text[])) AS u(id, units)
     WHERE t.session_id = :sid AND t.id = u.id
       AND (t.units IS NULL OR t.units->>'rules' IS DISTINCT FROM :rules)
""")

# A user turn whose stored units record other rules than :rules made (an upgrade
# changed them): UNREAD but for a turn none was stored for yet, whose job (index,
# units) is still to come.
STALE = """role = 'user' AND content IS NOT NULL AND units IS NOT NULL
           AND units->>'rules' IS DISTINCT FROM :rules"""

# stale_live_turns: up to :n sessions, by row id in (:after, :upto], that have a live
# user turn whose record is STALE, and those turns of theirs, (session, row id, text)
# oldest first. The restamp sweep's read: it walks the live turns' partial index
# (turns_live_idx) over that range of sessions only (each statement's work bounded),
# then reads each picked session's by it (LATERAL, kept apart by OFFSET 0: a join was
# planned as a scan of the whole table, 14-32 ms a batch on 22,700 turns, growing with
# the history); never the compacted history. Every tenant at once.
STALE_LIVE_TURNS = text(f"""
    WITH picked AS MATERIALIZED (
        SELECT DISTINCT session_id FROM turns
         WHERE session_id > :after AND session_id <= :upto AND NOT compacted AND {STALE}
         ORDER BY session_id
         LIMIT :n)
    SELECT p.session_id, t.id, t.content
      FROM picked p CROSS JOIN LATERAL (
          SELECT id, content, seq FROM turns
           WHERE session_id = p.session_id AND NOT compacted AND {STALE}
          OFFSET 0) t
     ORDER BY p.session_id, t.seq
""")

# last_session: the newest session's row id, of every tenant (the sweep's end).
LAST_SESSION = text("SELECT max(id) FROM sessions")

SET_SESSION_INDEX = text("""
    UPDATE sessions SET episode_seq = greatest(episode_seq, :episode_seq),
        last_user_seq = coalesce(:last_user_seq, last_user_seq),
        last_user_embedding = coalesce(:last_user_embedding, last_user_embedding)
    WHERE id = :sid AND tenant_id = :tenant
""")

# promote_head: what promotion starts from: the session, its mark and its state.
PROMOTE_HEAD = text("""
    SELECT s.tenant_id, s.external_id, s.user_id, s.promoted_seq, ts.state
    FROM sessions s JOIN task_states ts ON ts.session_id = s.id
    WHERE s.id = :sid
""")

SET_PROMOTED = text("""
    UPDATE sessions SET promoted_seq = greatest(promoted_seq, :seq) WHERE id = :sid
""")

FORGET_TURN_EMBEDDINGS = text("""
    UPDATE sessions SET last_user_embedding = NULL, last_user_seq = NULL
    WHERE last_user_embedding IS NOT NULL
""")

# Read on the context path straight through the driver connection.
LAST_USER_EMBEDDING = "SELECT last_user_embedding FROM sessions WHERE id = $1"


@dataclass(frozen=True)
class IndexHead:
    id: int
    tenant_id: str
    external_id: str
    user_id: int
    episode_seq: int
    last_user_seq: int | None
    live_turns: int
    turn_count: int
    goal: str | None


@dataclass(frozen=True)
class PromoteHead:
    tenant_id: str
    external_id: str
    user_id: int
    promoted_seq: int
    state: dict[str, Any]


async def index_head(conn: AsyncConnection, *, session_pk: int | None) -> IndexHead | None:
    row = (await conn.execute(INDEX_HEAD, {"sid": session_pk})).first()
    return None if row is None else IndexHead(**row._mapping)


async def turns_after_marked(
    conn: AsyncConnection, *, session_pk: int, after_seq: int, rules: str
) -> tuple[list[TurnView], int | None, list[tuple[int, str]]]:
    """The turns after ``after_seq``, oldest first, and, read in the same statement, the
    row id of the newest: the indexer checks it with ``index_read_current`` before it
    commits what it derived from them (a pop may have removed them meanwhile). Third,
    the user turns among them whose units are to be read by ``rules`` (none stored, or
    stored by other rules): (row id, text)."""
    params = {"sid": session_pk, "after": after_seq, "rules": rules}
    rows = (await conn.execute(UNINDEXED_TURNS, params)).all()
    unread = [(r.id, r.content) for r in rows if r.unread]
    return [turn_view(r) for r in rows], (rows[-1].id if rows else None), unread


async def set_turn_units(
    conn: AsyncConnection, *, session_pk: int, units: Sequence[tuple[int, str]], rules: str
) -> None:
    """Store what each user turn states, (row id, JSON text made by ``rules``), where
    none is stored yet or other rules stored it."""
    if units:
        ids, records = [i for i, _ in units], [u for _, u in units]
        await conn.execute(
            SET_TURN_UNITS, {"sid": session_pk, "ids": ids, "units": records, "rules": rules}
        )


async def stale_live_turns(
    conn: AsyncConnection, *, after: int, upto: int, sessions: int, rules: str
) -> dict[int, list[tuple[int, str]]]:
    """The live user turns whose records other rules than ``rules`` made, of up to
    ``sessions`` sessions with row ids in (``after``, ``upto``] that have any: (row id,
    text) by session, sessions and turns in order."""
    params = {"after": after, "upto": upto, "n": sessions, "rules": rules}
    found: dict[int, list[tuple[int, str]]] = {}
    for r in await conn.execute(STALE_LIVE_TURNS, params):
        found.setdefault(r.session_id, []).append((r.id, r.content))
    return found


async def last_session(conn: AsyncConnection) -> int:
    """The newest session's row id (0: none)."""
    return int((await conn.execute(LAST_SESSION)).scalar() or 0)


async def set_index_marks(
    conn: AsyncConnection,
    *,
    tenant: str,
    session_pk: int,
    episode_seq: int,
    last_user_seq: int | None,
    last_user_embedding: list[float] | None,
) -> None:
    """Indexing closed episodes through ``episode_seq`` (and maybe embedded a user turn)."""
    await conn.execute(
        SET_SESSION_INDEX,
        {
            "tenant": tenant,
            "sid": session_pk,
            "episode_seq": episode_seq,
            "last_user_seq": last_user_seq,
            "last_user_embedding": last_user_embedding,
        },
    )


async def promote_head(conn: AsyncConnection, *, session_pk: int | None) -> PromoteHead | None:
    row = (await conn.execute(PROMOTE_HEAD, {"sid": session_pk})).first()
    if row is None:
        return None
    return PromoteHead(
        tenant_id=row.tenant_id,
        external_id=row.external_id,
        user_id=row.user_id,
        promoted_seq=row.promoted_seq,
        state=row.state,
    )


async def set_promoted(conn: AsyncConnection, *, session_pk: int | None, seq: int) -> None:
    await conn.execute(SET_PROMOTED, {"sid": session_pk, "seq": seq})


async def forget_turn_embeddings(conn: AsyncConnection) -> None:
    """Drop every session's embedded user turn (another model made it)."""
    await conn.execute(FORGET_TURN_EMBEDDINGS)


async def last_user_embedding(db: asyncpg.Connection, *, session_pk: int) -> list[float] | None:
    """The newest user turn's vector (None if never embedded)."""
    vector: list[float] | None = await db.fetchval(LAST_USER_EMBEDDING, session_pk)
    return vector


# ----------------------------------------------------------------- the API's reads

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


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    user_id: str
    created_at: datetime
    turn_count: int
    history_tokens: int
    state_version: int
    pending_jobs: int
    last_compression_at: datetime | None
    compressions: int


@dataclass(frozen=True)
class StoredState:
    version: int
    state: dict[str, Any]
    updated_at: datetime | None
    rendered: str


@dataclass(frozen=True)
class StoredTurn:
    id: str
    seq: int
    role: str
    content: str | None
    name: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    tokens: int
    emphasized: bool
    metadata: dict[str, Any]
    created_at: datetime
    compacted: bool


@dataclass(frozen=True)
class TurnPage:
    turns: list[StoredTurn]
    next_after_seq: int | None


async def session_pk(conn: AsyncConnection, *, tenant: str, session: str) -> int:
    pk = (await conn.execute(SESSION_PK, {"tenant": tenant, "session": session})).scalar()
    if pk is None:
        raise NotFound(f"session {session!r} not found")
    return int(pk)


async def get_session(conn: AsyncConnection, *, tenant: str, session: str) -> SessionSummary:
    row = (await conn.execute(SESSION_SUMMARY, {"tenant": tenant, "session": session})).first()
    if row is None:
        raise NotFound(f"session {session!r} not found")
    return SessionSummary(
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


async def get_state(conn: AsyncConnection, *, tenant: str, session: str) -> StoredState:
    sid = await session_pk(conn, tenant=tenant, session=session)
    row = (await conn.execute(STATE, {"sid": sid})).first()
    if row is None:
        return StoredState(version=0, state={}, updated_at=None, rendered="")
    return StoredState(
        version=row.version,
        state=row.state,
        updated_at=row.updated_at,
        rendered=row.rendered,
    )


async def list_turns(
    conn: AsyncConnection, *, tenant: str, session: str, after_seq: int, limit: int
) -> TurnPage:
    sid = await session_pk(conn, tenant=tenant, session=session)
    rows = (
        await conn.execute(TURNS_PAGE, {"sid": sid, "after_seq": after_seq, "limit": limit + 1})
    ).all()
    more = len(rows) > limit
    rows = rows[:limit]
    turns = [_stored(r) for r in rows]
    return TurnPage(turns=turns, next_after_seq=turns[-1].seq if more and turns else None)


def _stored(r: Any) -> StoredTurn:
    return StoredTurn(
        id=r.external_id,
        seq=r.seq,
        role=r.role,
        content=r.content,
        name=r.name,
        tool_calls=r.tool_calls,
        tool_call_id=r.tool_call_id,
        tokens=r.tokens,
        emphasized=r.emphasized,
        metadata=r.metadata,
        created_at=r.created_at,
        compacted=r.compacted,
    )


async def delete_session(conn: AsyncConnection, *, tenant: str, session: str) -> None:
    if (await conn.execute(DELETE_SESSION, {"tenant": tenant, "session": session})).first() is None:
        raise NotFound(f"session {session!r} not found")


# attach_to_task: the session works on a task, for an agent (one task per session).
ATTACH_TO_TASK = text("UPDATE sessions SET task_id = :tid, agent = :agent WHERE id = :sid")

# claim_for_agent: a new session takes its poster's agent; an existing one keeps its own.
CLAIM_FOR_AGENT = text("""
    UPDATE sessions SET agent = coalesce(agent, :agent)
    WHERE tenant_id = :tenant AND external_id = :session
    RETURNING agent
""")


async def attach_to_task(
    conn: AsyncConnection, *, session_pk: int, task_pk: int, agent: str
) -> None:
    await conn.execute(ATTACH_TO_TASK, {"sid": session_pk, "tid": task_pk, "agent": agent})


async def claim_for_agent(
    conn: AsyncConnection, *, tenant: str, session: str, agent: str
) -> str | None:
    """Give an agent-less session to ``agent``; the session's agent afterwards."""
    params = {"tenant": tenant, "session": session, "agent": agent}
    row = (await conn.execute(CLAIM_FOR_AGENT, params)).first()
    return None if row is None else row.agent


# --- The inspector's reads ------------------------------------------------------------


@dataclass(frozen=True)
class SessionRow:
    """One line of the sessions overview."""

    pk: int
    session: str
    user: str
    created_at: datetime
    updated_at: datetime
    turn_count: int
    total_tokens: int  # what the whole raw history costs
    live_tokens: int  # turns not compacted yet
    state_tokens: int  # the rendered task state
    state_version: int
    compressions: int
    last_compression_at: datetime | None
    pending_jobs: int


@dataclass(frozen=True)
class TimelineTurn:
    seq: int
    id: str
    role: str
    content: str | None
    name: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    tokens: int
    emphasized: bool
    created_at: datetime
    compacted: bool
    event_id: int | None  # the compression that took it


# Sort keys of the overview; the value is an ORDER BY clause from this fixed set only.
SESSION_ORDER = {
    "activity": "s.updated_at DESC, s.id DESC",
    "turns": "s.turn_count DESC, s.id DESC",
    "tokens": "s.total_tokens DESC, s.id DESC",
    "compressions": "s.compressions DESC, s.id DESC",
    "pending": "pending_jobs DESC, s.updated_at DESC, s.id DESC",
}

# sessions_overview: a tenant's sessions (one, or those whose session or user id
# contains the search), with their counters and pending jobs.
SESSIONS_OVERVIEW = """
    SELECT s.id AS pk, s.external_id AS session, u.external_id AS user, s.created_at,
           s.updated_at, s.turn_count, s.total_tokens, s.history_tokens AS live_tokens,
           coalesce(ts.rendered_tokens, 0) AS state_tokens,
           coalesce(ts.version, 0) AS state_version, s.compressions, s.last_compression_at,
           (SELECT count(*) FROM jobs j
             WHERE j.session_id = s.id AND j.status IN ('queued', 'running')) AS pending_jobs
    FROM sessions s
    JOIN users u ON u.id = s.user_id
    LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.tenant_id = :tenant
      AND (CAST(:exact AS text) IS NULL OR s.external_id = :exact)
      AND (CAST(:user AS text) IS NULL OR u.external_id = :user)
      AND (:pattern = '' OR s.external_id ILIKE :pattern OR u.external_id ILIKE :pattern)
    ORDER BY {order}
    LIMIT :limit
"""
_OVERVIEW = {key: text(SESSIONS_OVERVIEW.format(order=o)) for key, o in SESSION_ORDER.items()}

# timeline_turns: a range of a session's archive with the compression that took each turn.
TIMELINE_TURNS = text("""
    SELECT seq, external_id AS id, role, content, name, tool_calls, tool_call_id, tokens,
           emphasized, created_at, compacted, event_id
    FROM turns
    WHERE session_id = :sid AND seq > :after_seq
    ORDER BY seq
    LIMIT :limit
""")


def _like(search: str) -> str:
    escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%" if search else ""


async def sessions_overview(
    conn: AsyncConnection, *, tenant: str, search: str = "", sort: str = "activity", limit: int
) -> list[SessionRow]:
    query = _OVERVIEW.get(sort, _OVERVIEW["activity"])
    params = {"pattern": _like(search.strip()), "limit": limit}
    return [SessionRow(**r._asdict()) for r in await conn.execute(query, _p(tenant, **params))]


async def user_sessions(
    conn: AsyncConnection, *, tenant: str, user: str, limit: int
) -> list[SessionRow]:
    rows = await conn.execute(_OVERVIEW["activity"], _p(tenant, user=user, limit=limit))
    return [SessionRow(**r._asdict()) for r in rows]


def _p(tenant: str, **given: Any) -> dict[str, Any]:
    return {"tenant": tenant, "exact": None, "user": None, "pattern": "", **given}


async def session_row(conn: AsyncConnection, *, tenant: str, session: str) -> SessionRow:
    params = _p(tenant, exact=session, limit=1)
    row = (await conn.execute(_OVERVIEW["activity"], params)).first()
    if row is None:
        raise NotFound(f"session {session!r} not found")
    return SessionRow(**row._asdict())


async def timeline_turns(
    conn: AsyncConnection, *, session_pk: int, after_seq: int, limit: int
) -> list[TimelineTurn]:
    rows = await conn.execute(
        TIMELINE_TURNS, {"sid": session_pk, "after_seq": after_seq, "limit": limit}
    )
    return [TimelineTurn(**r._asdict()) for r in rows]

"""Memories in Postgres + pgvector: write, confirm, supersede, search, expire, erase.

Search never filters a user *after* an approximate scan (the failure that makes
other stores return 1–2 of 10 results): a user's candidates come either from an
exact scan of that user's rows (the common case: a user has at most thousands of
memories, and the btree on user_id makes that cheap), or, for users with more
than EXACT_SCAN_MAX rows, from HNSW with pgvector 0.8's iterative scan, which
keeps scanning until the filter has passed k rows, topped up exactly if short.
Either way a search returns min(k, rows of that user) results.

The HNSW index holds only heavy users' rows (``memories.ann``, a partial index): a row
is written into it when its user has rows there already, and a user's rows are moved
into it once, by the worker, in short batches, when the user passes EXACT_SCAN_MAX
(FLIP_HEAVY). Every other vector written costs no graph insert. A heavy user's search
ranks its rows outside the index exactly (VECTOR_HNSW), so it never depends on the
move being done.

The exact scan ranks a user's vectors from their half-precision copies in
``memory_vectors`` (narrow rows: a third of the pages), then re-ranks the best by
the full vectors. The reads of the /context path (the two search legs, the turns)
go straight through the driver: SQLAlchemy's statement handling cost more than
Postgres's execution of them.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypeAlias

import asyncpg
from pgvector import Vector
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import jsonio
from app.stores import queue
from app.stores.engine import driver_connection, plan_fence, positional
from app.stores.tables import EMBEDDING_DIM

EXACT_SCAN_MAX = 5_000
# Rows a batch of a heavy user's move into the HNSW index takes (FLIP_HEAVY): ~80 ms of
# Postgres CPU. ``bench.heavy_move`` (6,000 rows, load 6-7): the longest batch held its
# rows 0.39-0.54 s (100 rows: 0.47-1.07 s, 200: 1.24-1.56 s; all in one transaction
# 13-34 s); the move's CPU the same at every size (9-10 s).
FLIP_BATCH = 50
# ef_search 200: recall 0.958 at 1M rows for users past EXACT_SCAN_MAX (bench.memory).
HNSW_EF_SEARCH = 200
HNSW_MAX_SCAN_TUPLES = 50_000

MEMORY_COLUMNS = """
    m.id, m.kind, m.text, m.pinned, m.source, m.metadata, m.created_at, m.last_confirmed_at,
    m.times_confirmed, m.expires_at, m.superseded_by, m.session_id, m.embedding_model
"""
# The search legs' columns: MEMORY_COLUMNS with the two JSON documents as text, decoded
# when the row is built (``Ranking``): a search reads more candidates than its caller
# keeps (the fusion of two legs keeps about half), and only the kept ones are built.
SEARCH_COLUMNS = MEMORY_COLUMNS.replace("m.source,", "m.source::text AS source,").replace(
    "m.metadata,", "m.metadata::text AS metadata,"
)


# The reads of the /context path run on the driver connection under a SQLAlchemy one;
# a caller that holds it already passes it (fetching it again costs a greenlet switch).
Connection: TypeAlias = AsyncConnection | asyncpg.Connection


async def _driver(conn: Connection) -> asyncpg.Connection:
    return conn if isinstance(conn, asyncpg.Connection) else await driver_connection(conn)


@dataclass(frozen=True)
class MemoryRow:
    id: int
    kind: str
    text: str
    pinned: bool
    source: dict[str, Any]
    metadata: dict[str, Any]
    created_at: datetime
    last_confirmed_at: datetime
    times_confirmed: int
    expires_at: datetime | None
    superseded_by: int | None
    session_id: int | None
    embedding_model: str | None
    score: float | None = None

    def scored(self, score: float | None) -> MemoryRow:
        """This memory with ``score`` (``dataclasses.replace`` costs several times more:
        it is called for every fused hit of every search)."""
        return MemoryRow(
            self.id,
            self.kind,
            self.text,
            self.pinned,
            self.source,
            self.metadata,
            self.created_at,
            self.last_confirmed_at,
            self.times_confirmed,
            self.expires_at,
            self.superseded_by,
            self.session_id,
            self.embedding_model,
            score,
        )


# MemoryRow's fields: MEMORY_COLUMNS in their order, then the score.
_FIELDS = tuple(f.name for f in fields(MemoryRow))
_COLUMNS = len(_FIELDS) - 1
assert [c.strip().removeprefix("m.") for c in MEMORY_COLUMNS.split(",")] == list(_FIELDS[:-1])


def _row_at(r: asyncpg.Record, start: int) -> MemoryRow:
    """The memory in ``r``'s ``MEMORY_COLUMNS`` from column ``start`` on, unscored: by
    position, not by name (the /context path builds about a hundred rows a read; 4.5 µs
    a row against 6.5). (Setting the fields into the instance's ``__dict__`` would build
    it faster still, but every later attribute read of such an instance costs four times
    as much.) The search legs' rows are built by ``_searched_at``."""
    values: tuple[Any, ...] = (*r[start : start + _COLUMNS], None)
    return MemoryRow(*values)


def _searched_at(r: asyncpg.Record, start: int, score: float | None = None) -> MemoryRow:
    """The memory in ``r``'s ``SEARCH_COLUMNS`` from column ``start`` on, with ``score``
    (by default the one in the column after them)."""
    end = start + _COLUMNS
    mid, kind, text_, pinned, source, metadata, *rest = r[start:end]
    values: tuple[Any, ...] = (
        *(mid, kind, text_, pinned, jsonio.loads(source), jsonio.loads(metadata)),
        *rest,
        float(r[end]) if score is None else score,
    )
    return MemoryRow(*values)


@dataclass(frozen=True)
class Ranking:
    """A search leg's memories, best first, as the driver read them (``SEARCH_COLUMNS``
    from column ``start`` on, the score after them): a caller that keeps some of them
    builds only those."""

    records: Sequence[asyncpg.Record]
    start: int = 0

    def ids(self) -> list[int]:
        return [r[self.start] for r in self.records]

    def row(self, at: int, score: float | None) -> MemoryRow:
        """The memory at position ``at``, with ``score``."""
        return _searched_at(self.records[at], self.start, score)

    def rows(self) -> list[MemoryRow]:
        """Every memory, with its leg's score."""
        return [_searched_at(r, self.start) for r in self.records]


def _row(r: Any, score: float | None = None) -> MemoryRow:
    """A memory from a row of ``MEMORY_COLUMNS`` (a driver record or ``row._mapping``)."""
    return MemoryRow(
        id=r["id"],
        kind=r["kind"],
        text=r["text"],
        pinned=r["pinned"],
        source=r["source"],
        metadata=r["metadata"],
        created_at=r["created_at"],
        last_confirmed_at=r["last_confirmed_at"],
        times_confirmed=r["times_confirmed"],
        expires_at=r["expires_at"],
        superseded_by=r["superseded_by"],
        session_id=r["session_id"],
        embedding_model=r["embedding_model"],
        score=score,
    )


# index_terms: a memory's postings, written with it (one statement with the insert).
POSTINGS = """
    INSERT INTO memory_terms (user_id, term, memory_id, kind, tf, dl)
    SELECT m.user_id, x.term, m.id, m.kind, x.tf, CAST(:dl AS integer)
    FROM m, unnest(CAST(:posting_terms AS text[]), CAST(:posting_tfs AS integer[])) AS x(term, tf)
"""


def postings(terms: list[str]) -> dict[str, Any]:
    """Bind parameters of ``POSTINGS`` for a memory whose terms (with repeats) are ``terms``."""
    counts: dict[str, int] = {}
    for term in terms:
        counts[term] = counts.get(term, 0) + 1
    return {
        "posting_terms": list(counts),
        "posting_tfs": list(counts.values()),
        "dl": max(1, len(terms)),
    }


# vector_copy: the half-precision copy of the vectors of the memories in ``m`` (those that
# have one), written by the statement that writes them; the exact search ranks a user's
# memories by these (VECTOR_ROUTED). Deleted with their memory.
VECTOR_COPY = f"""
    INSERT INTO memory_vectors (memory_id, user_id, kind, embedding)
    SELECT m.id, m.user_id, m.kind, CAST(m.embedding AS halfvec({EMBEDDING_DIM}))
    FROM m WHERE m.embedding IS NOT NULL
    ON CONFLICT (memory_id) DO UPDATE SET embedding = EXCLUDED.embedding
"""


# heavy_user: whether a user's new vectors go into the HNSW index: the user has rows
# there already (``memories_user_ann_idx``: one probe). A row written while its user's
# rows are being moved (FLIP_HEAVY) is written outside the index; the heavy search
# ranks it exactly, and the user's next flip moves it.
def heavy_user(user_pk: str) -> str:
    return f"EXISTS (SELECT 1 FROM memories h WHERE h.user_id = {user_pk} AND h.ann)"


# insert_memory: the one way a memory is written (curated, promoted or indexed), with
# its postings; an indexed episode or turn comes with its vector and session position.
INSERT_MEMORY = text(f"""
    WITH m AS (
        INSERT INTO memories (tenant_id, user_id, kind, text, text_key, pinned, source, metadata,
                              session_id, ttl_days, expires_at, embedding,
                              embedding_model, embedding_dim, turn_seq, ann)
        VALUES (:tenant, :user_pk, :kind, :text, :text_key, CAST(:pinned AS boolean),
                :source, :metadata, :session_pk,
                CAST(:ttl_days AS integer),
                CASE WHEN CAST(:pinned AS boolean) OR CAST(:ttl_days AS integer) IS NULL THEN NULL
                     ELSE now() + make_interval(days => CAST(:ttl_days AS integer)) END,
                :embedding, :model, CAST(:dim AS integer), CAST(:turn_seq AS integer),
                {heavy_user("CAST(:user_pk AS bigint)")})
        RETURNING id, user_id, kind, embedding),
    p AS ({POSTINGS}),
    v AS ({VECTOR_COPY})
    SELECT id FROM m
""")

# drop_open_episodes: indexed rows whose turns may still change; the next run redoes them.
DROP_OPEN_EPISODES = text("""
    DELETE FROM memories
    WHERE session_id = :sid AND tenant_id = :tenant
      AND kind = 'episode' AND (metadata->>'open')::boolean
""")

# insert_indexed: the episodes and single turns an index run writes (one tenant; the
# rows of one session, or more), with their postings and half-precision copies, in one
# statement. Each row's id is drawn first, so its postings find it by position.
INSERT_INDEXED = text(f"""
    WITH r AS MATERIALIZED (
        SELECT nextval(pg_get_serial_sequence('memories', 'id')) AS id, r.*
        FROM unnest(CAST(:user_pks AS bigint[]), CAST(:session_pks AS bigint[]),
                    CAST(:texts AS text[]), CAST(:text_keys AS text[]),
                    CAST(:sources AS jsonb[]), CAST(:metadatas AS jsonb[]),
                    CAST(:turn_seqs AS integer[]), CAST(:embeddings AS vector[]),
                    CAST(:dls AS integer[]))
             WITH ORDINALITY AS r(user_id, session_id, text, text_key, source, metadata,
                                  turn_seq, embedding, dl, ord)),
    m AS (
        INSERT INTO memories (id, tenant_id, user_id, kind, text, text_key, pinned, source,
                              metadata, session_id, ttl_days, expires_at, embedding,
                              embedding_model, embedding_dim, turn_seq, ann)
        SELECT r.id, :tenant, r.user_id, 'episode', r.text, r.text_key, false, r.source,
               r.metadata, r.session_id, CAST(:ttl_days AS integer),
               now() + make_interval(days => CAST(:ttl_days AS integer)), r.embedding,
               :model, CAST(:dim AS integer), r.turn_seq, {heavy_user("r.user_id")}
        FROM r ORDER BY r.ord
        RETURNING id, user_id, kind, embedding),
    p AS (
        INSERT INTO memory_terms (user_id, term, memory_id, kind, tf, dl)
        SELECT r.user_id, x.term, r.id, 'episode', x.tf, r.dl
        FROM unnest(CAST(:posting_rows AS bigint[]), CAST(:posting_terms AS text[]),
                    CAST(:posting_tfs AS integer[])) AS x(ord, term, tf)
        JOIN r ON r.ord = x.ord),
    v AS ({VECTOR_COPY})
    SELECT count(*) FROM m
""")

# similar_existing: a user's live curated memories nearest to a vector, with theirs.
SIMILAR_EXISTING = text("""
    SELECT id, kind, text, embedding FROM memories
    WHERE user_id = :user_pk AND superseded_by IS NULL AND kind <> 'episode'
      AND embedding IS NOT NULL AND embedding_model = :model
    ORDER BY (embedding <=> :q) + 0
    LIMIT :k
""")

# other_models: a stored embedding made by a model other than the configured one.
OTHER_MODELS = text("""
    SELECT embedding_model, count(*) AS n FROM memories
    WHERE embedding_model IS NOT NULL AND embedding_model <> :model
    GROUP BY embedding_model
""")

# forget_embeddings: vectors of another model are dropped (and their copies), to be
# recomputed.
FORGET_EMBEDDINGS = text("""
    WITH m AS (
        UPDATE memories SET embedding = NULL, embedding_model = NULL, embedding_dim = NULL
        WHERE embedding_model IS DISTINCT FROM :model
        RETURNING id, tenant_id, user_id),
    copies AS (DELETE FROM memory_vectors v USING m WHERE v.memory_id = m.id)
    SELECT tenant_id, user_id FROM m
""")

# add_memory: the write behind POST /memories in one round trip, for a user that
# exists (no row otherwise: the sessions store creates users). A live memory of the
# same wording is confirmed (as CONFIRM does) instead of stored twice; otherwise the
# memory is inserted with its postings (as INSERT_MEMORY does). Returns the stored
# row, whether it is new, and the user's internal id.
ADD_MEMORY = text(f"""
    WITH u AS (
        SELECT id FROM users WHERE tenant_id = :tenant AND external_id = :user),
    existing AS (
        SELECT m.id FROM memories m, u
        WHERE m.user_id = u.id AND m.text_key = :text_key AND m.superseded_by IS NULL
        LIMIT 1),
    confirmed AS (
        UPDATE memories m SET last_confirmed_at = now(), times_confirmed = times_confirmed + 1,
            pinned = m.pinned OR CAST(:pinned AS boolean),
            expires_at = CASE WHEN m.pinned OR CAST(:pinned AS boolean) OR m.ttl_days IS NULL
                              THEN NULL ELSE now() + make_interval(days => m.ttl_days) END
        FROM existing e WHERE m.id = e.id
        RETURNING {MEMORY_COLUMNS}, m.user_id, false AS created),
    m AS (
        INSERT INTO memories AS m (tenant_id, user_id, kind, text, text_key, pinned, source,
                                   metadata, ttl_days, expires_at)
        SELECT :tenant, u.id, :kind, :text, :text_key, CAST(:pinned AS boolean),
               CAST(:source AS jsonb), CAST(:metadata AS jsonb), CAST(:ttl_days AS integer),
               CASE WHEN CAST(:pinned AS boolean) OR CAST(:ttl_days AS integer) IS NULL
                    THEN NULL ELSE now() + make_interval(days => CAST(:ttl_days AS integer)) END
        FROM u WHERE NOT EXISTS (SELECT 1 FROM existing)
        RETURNING {MEMORY_COLUMNS}, m.user_id, true AS created),
    p AS ({POSTINGS}),
    -- a new memory's embedding job, one waiting per user (``dedup_key``)
    job AS ({
    queue.enqueue_for(
        "m",
        payload="jsonb_build_object('user_pk', m.user_id)",
        dedup_key="CAST(:job_key_prefix AS text) || m.user_id",
    )
})
    SELECT *, {queue.notify_added("job")} AS jobs_added FROM m
    UNION ALL SELECT *, 0 FROM confirmed
""")

# Run on the driver: the SQLAlchemy layer cost more CPU than the statement's own client
# side (0.30 vs 0.17 ms an add, measured in one process, alternating).
ADD_MEMORY_ON_DRIVER = positional(ADD_MEMORY)

# confirm: a restatement refreshes the memory instead of duplicating it.
CONFIRM = text("""
    UPDATE memories SET last_confirmed_at = now(), times_confirmed = times_confirmed + 1,
        pinned = pinned OR CAST(:pinned AS boolean),
        expires_at = CASE WHEN pinned OR CAST(:pinned AS boolean) OR ttl_days IS NULL THEN NULL
                          ELSE now() + make_interval(days => ttl_days) END
    WHERE id = :id AND user_id = :user_pk
""")

# supersede: the old memory keeps a pointer to its successor and leaves retrieval.
SUPERSEDE = text("""
    UPDATE memories SET superseded_by = :new_id, superseded_at = now()
    WHERE id = :id AND user_id = :user_pk AND superseded_by IS NULL
""")


LIST_MEMORIES = text(f"""
    SELECT {MEMORY_COLUMNS} FROM memories m
    WHERE m.user_id = :user_pk AND m.superseded_by IS NULL
      AND (CAST(:kind AS text) IS NULL OR m.kind = :kind)
      AND (m.expires_at IS NULL OR m.expires_at > now())
      AND m.metadata ->> 'granularity' IS DISTINCT FROM 'turn'
    ORDER BY m.pinned DESC, m.last_confirmed_at DESC, m.id DESC
    LIMIT :limit
""")

# The vector statements' parameters (through the driver): $1 user, $2 query vector,
# $3 model, $4 kind or NULL, $5 k.

# vector_exact: exact cosine ranking over one user's live memories (btree on user_id).
# The "+ 0" keeps the planner off the HNSW index: this path is meant to be exact.
VECTOR_EXACT = f"""
    SELECT {SEARCH_COLUMNS}, 1 - (m.embedding <=> $2) AS score
    FROM memories m
    WHERE m.user_id = $1 AND m.superseded_by IS NULL AND m.embedding IS NOT NULL
      AND m.embedding_model = $3
      AND (CAST($4 AS text) IS NULL OR m.kind = $4)
      AND (m.expires_at IS NULL OR m.expires_at > now())
    ORDER BY (m.embedding <=> $2) + 0
    LIMIT $5
"""

# vector_routed ($6: the largest user searched exactly): the user's live count
# (bounded) and, for an ordinary user, the exact ranking: the common case in one round
# trip. The user's vectors are ranked from their half-precision copies
# (``memory_vectors``: a third of the pages of the memories' rows); the best
# k + NEAR_SLACK are re-ranked by their full vectors and checked for life (superseded,
# expired, another model), fetched by primary key (``id = ANY``: a join let a planner
# that misjudged the live share scan every live memory per candidate; the liveness test
# stays outside the fetch, which ``OFFSET 0`` keeps apart: with it inside, a plan made
# before any ANALYZE read the whole index of live memories, a partial index, to apply
# it). Every row comes with how many copies were ranked (``near``): fewer than k live
# rows out of a full ``near`` means the slack ran out, and the caller ranks the
# memories themselves (VECTOR_EXACT). A heavy user gets one row (live count, NULL
# memory) and is searched through HNSW. The query's half-precision copy is made once
# (a subquery, planned as an InitPlan): written inline, a generic plan cast the query
# vector again for every copy it ranked (~500 casts of 512 floats a search; backend
# CPU a statement 0.72 -> 0.57 ms on a caught-up user, the same rows).
NEAR_SLACK = 16
_routed = f"""
    WITH live AS MATERIALIZED (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM memories WHERE user_id = $1 AND superseded_by IS NULL
            LIMIT CAST($6 AS integer) + 1) AS bounded),
    near AS MATERIALIZED (
        SELECT v.memory_id FROM memory_vectors v, live
        WHERE live.n <= CAST($6 AS integer) AND v.user_id = $1
          AND (CAST($4 AS text) IS NULL OR v.kind = $4)
        ORDER BY v.embedding <=> (SELECT CAST(CAST($2 AS vector) AS halfvec({EMBEDDING_DIM})))
        LIMIT CAST($5 AS integer) + {NEAR_SLACK}){{fence}}
    SELECT live.n AS live, (SELECT count(*) FROM near) AS near, e.*
    FROM live{{fence_join}} LEFT JOIN LATERAL (
        SELECT {SEARCH_COLUMNS}, 1 - (m.embedding <=> $2) AS score
        FROM (SELECT * FROM memories m WHERE m.id = ANY (ARRAY(SELECT memory_id FROM near))
              OFFSET 0) AS m
        WHERE m.superseded_by IS NULL AND m.embedding_model = $3
          AND (m.expires_at IS NULL OR m.expires_at > now())
        ORDER BY m.embedding <=> $2, m.id
        LIMIT $5) AS e ON true
"""

# Plans of the routed statement. asyncpg prepares it once per pool connection; after
# five runs Postgres may swap the plans it makes for each execution's values for one
# generic plan, costed for the statistics of that moment and kept on the connection
# until they change (an ANALYZE). Costed for a young database (a handful of rows, or
# a few users holding them all), that plan reads the tables by sequential scans and
# keeps doing so while they grow: on a fresh database it scanned every live memory per
# candidate (7-17 ms instead of 0.4, on one of two pool connections of the peers
# benchmark). EXPLAIN shows where the generic plan reads each table through its user
# or primary-key index, which stays right as the tables grow (``SETTLED_STATISTICS``,
# for both tables):
# - never vacuumed nor analyzed (``reltuples`` -1: the planner assumes a user holds
#   0.5 % of the rows) and at least SETTLED_PAGES long (from ~17 pages on; under 10,
#   the planner assumes 10, and read the memories by a sequential scan);
# - analyzed with at least SETTLED_ROWS rows of at least SETTLED_USERS users (index
#   plans with 20 users from ~190 rows, with 10 users at 450 and with 15 at 14,800, a
#   user's rows added together or one by one; with 5 users, sequential scans).
#
# So a connection searches with VECTOR_ROUTED while it finds the statistics settled,
# and with VECTOR_ROUTED_YOUNG otherwise. VECTOR_ROUTED_YOUNG carries ``fence``
# (``engine.plan_fence``: one row, never true), which a plan made for the values drops
# and a generic plan must cost as a million-row scan: Postgres keeps planning it for
# each execution's values (the 0.2-0.4 ms a search VECTOR_ROUTED does not pay). A
# connection looks at the statistics on its first search and then every
# SETTLED_CHECK_S (a round trip of ~0.1 ms).
SETTLED_PAGES = 64
SETTLED_ROWS = 500
SETTLED_USERS = 10
SETTLED_CHECK_S = 10.0
VECTOR_ROUTED = _routed.format(fence="", fence_join="")
VECTOR_ROUTED_YOUNG = _routed.format(
    fence=f""",
    fence AS MATERIALIZED ({plan_fence("CAST($5 AS integer) < 0")})""",
    fence_join=" CROSS JOIN fence",
)

# settled_statistics: whether both tables of the routed statement are settled (above):
# never vacuumed nor analyzed and SETTLED_PAGES long, or analyzed with SETTLED_ROWS
# rows of SETTLED_USERS users (``n_distinct``: a count, or minus a share of the rows).
SETTLED_STATISTICS = f"""
    SELECT count(*) = 2 FROM pg_class c
    LEFT JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = c.relname
                        AND s.attname = 'user_id' AND NOT s.inherited
    WHERE c.oid IN (to_regclass('memories'), to_regclass('memory_vectors'))
      AND CASE WHEN c.reltuples < 0
               THEN pg_relation_size(c.oid)
                    >= {SETTLED_PAGES} * current_setting('block_size')::integer
               ELSE c.reltuples >= {SETTLED_ROWS}
                    AND CASE WHEN s.n_distinct < 0 THEN -s.n_distinct * c.reltuples
                             ELSE s.n_distinct END >= {SETTLED_USERS} END
"""

# When each pool connection last looked at the statistics, and whether they were settled.
_looked: weakref.WeakKeyDictionary[asyncpg.Connection, tuple[float, bool]] = (
    weakref.WeakKeyDictionary()
)


async def _routed_statement(db: asyncpg.Connection) -> str:
    """The routed statement ``db`` searches with (see above)."""
    now = time.monotonic()
    looked = _looked.get(db)
    if looked is None or now - looked[0] >= SETTLED_CHECK_S:
        looked = _looked[db] = (now, bool(await db.fetchval(SETTLED_STATISTICS)))
    return VECTOR_ROUTED if looked[1] else VECTOR_ROUTED_YOUNG


# vector_hnsw: a heavy user's k nearest, in legs merged by distance: the user's rows in
# the HNSW index, approximate, filtered inside the index scan (pgvector iterative scan;
# "m.ann" lets the planner use the partial index, "user_id + 0" keeps it off the btree,
# an exact scan of a heavy user, and both hold under the generic plans asyncpg's
# prepared statements get after five runs), and the user's rows outside the index,
# ranked exactly (through ``memories_user_ann_idx``: none, or the few written in a race
# with the user's move, or all of them before it). The index leg runs only for a user
# whose rows are in the index (``indexed``, one-time tests): not before the user's move
# (``heavy_user``), nor while FLIP_BATCH rows or more are still outside (``moving``: a
# move under way, or one cut short until the user's next). An iterative scan for a user
# with no or few rows in the index reads up to HNSW_MAX_SCAN_TUPLES of other users'
# rows to find them (184-556 ms in ``bench.memory`` with none); in a move, the user's
# rows already in the index are ranked exactly too (the third leg). Each row says which
# leg found it (``in_index``) and whether the index leg ran (``indexed``): an index leg
# short of k is topped up even when rows outside the index make up the count.
_LIVE = """m.superseded_by IS NULL AND m.embedding IS NOT NULL AND m.embedding_model = $3
      AND (CAST($4 AS text) IS NULL OR m.kind = $4)
      AND (m.expires_at IS NULL OR m.expires_at > now())"""
_MOVING = f"""(SELECT count(*) FROM (
                    SELECT 1 FROM memories o WHERE o.user_id = $1 AND NOT o.ann
                    LIMIT {FLIP_BATCH}) AS outside) = {FLIP_BATCH}"""
_INDEXED = f"""{heavy_user("$1")} AND NOT {_MOVING}"""
VECTOR_HNSW = f"""
    SELECT * FROM (
        (SELECT {SEARCH_COLUMNS}, 1 - (m.embedding <=> $2) AS score, true AS in_index,
                true AS indexed
         FROM memories m
         WHERE m.ann AND m.user_id + 0 = $1 AND {_LIVE} AND {_INDEXED}
         ORDER BY m.embedding <=> $2
         LIMIT $5)
        UNION ALL
        (SELECT {SEARCH_COLUMNS}, 1 - (m.embedding <=> $2) AS score, false, {_INDEXED}
         FROM memories m
         WHERE NOT m.ann AND m.user_id = $1 AND {_LIVE}
         ORDER BY (m.embedding <=> $2) + 0
         LIMIT $5)
        UNION ALL
        (SELECT {SEARCH_COLUMNS}, 1 - (m.embedding <=> $2) AS score, false, false
         FROM memories m
         WHERE m.ann AND m.user_id = $1 AND {_LIVE} AND {_MOVING}
         ORDER BY (m.embedding <=> $2) + 0
         LIMIT $5)) AS legs
"""

# hnsw_settings: the iterative scan for this transaction ($1 ef_search, $2 max scan
# tuples), in one round trip.
HNSW_SETTINGS = """
    SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),
           set_config('hnsw.ef_search', $1, true),
           set_config('hnsw.max_scan_tuples', $2, true),
           set_config('enable_seqscan', 'off', true)
"""

SEQSCAN_BACK_ON = "SELECT set_config('enable_seqscan', 'on', true)"

# lexical ($1 user, $2 terms, $3 kind or NULL, $4 k; through the driver): Okapi BM25
# over the user's postings (``memory_terms``: one row per memory
# and stemmed term, with its frequency in the memory and the memory's length), read
# through the primary key (user_id, term): only the postings of the query's terms,
# never every memory of the user. df counts the postings of a term, N the user's live
# memories, the average length is taken over the memories that matched. Rare terms (a
# name, an id) outweigh common ones; a repeated term saturates (k1); long memories
# are normalised (b). Superseded and expired memories are left out after scoring.
# The one-row CTEs are MATERIALIZED: inlined, the planner (expecting one posting)
# recounted the user's memories once per posting (36 of 38 ms for a 1,000-row user).
# A term's idf is computed once, with its df, not once per posting, and the constants
# are float8: a numeric literal made ``b * dl`` numeric arithmetic for every posting.
# The postings are read from the index three times, each read doing one thing, rather
# than once into a CTE that three passes then scan (writing ~4,000 postings into a
# tuplestore cost more than reading them from the index again, and df and the scoring
# then hashed a term's text for every posting): df by a count of each term's range of
# the index, the average length from one scan of all of them grouped by memory, and
# the scoring from each term's range again, its idf carried from the term's row (``w``,
# read in term order). A memory's score thus adds its terms' parts in the order the
# index holds them (term, then memory), the order of the single scan before: every
# value is the same double as before, so the ranking is too (2.65 -> 1.95 ms of
# backend CPU a statement on a caught-up user, the same ids and scores for 400 of
# 400 queries; docs/benchmarks.md, h16a). The scoring's LATERAL read is kept apart
# (``OFFSET 0``): pulled up into a join, a generic plan made while the table was
# small could read every user's postings by a sequential scan.
# The hits are fetched by primary key, one lookup each (a LATERAL subquery that
# ``OFFSET 0`` keeps apart, with the liveness test outside it): joined, a generic plan
# made while the table held a handful of rows read the index of every user's live
# memories once per hit (20 x 8,400 rows, 3.4 ms instead of 0.5, until an ANALYZE).
BM25_K1 = 1.2
BM25_B = 0.75
_OF_KIND = "(CAST($3 AS text) IS NULL OR kind = $3)"
LEXICAL = f"""
    WITH q AS MATERIALIZED (
        SELECT DISTINCT unnest(CAST($2 AS text[])) AS term),
    total AS MATERIALIZED (
        SELECT count(*)::float AS n FROM memories m
        WHERE m.user_id = $1 AND m.superseded_by IS NULL
          AND (CAST($3 AS text) IS NULL OR m.kind = $3)),
    w AS MATERIALIZED (
        SELECT q.term, ln(1 + (greatest(total.n, df.n) - df.n + 0.5) / (df.n + 0.5)) AS idf
        FROM q CROSS JOIN LATERAL (
            SELECT count(*)::float AS n FROM memory_terms
            WHERE user_id = $1 AND term = q.term AND {_OF_KIND}) AS df
        CROSS JOIN total
        ORDER BY q.term),
    avgdl AS MATERIALIZED (
        SELECT greatest(avg(d.dl), 1)::float AS v FROM (
            SELECT min(dl) AS dl FROM memory_terms
            WHERE user_id = $1 AND term = ANY(CAST($2 AS text[])) AND {_OF_KIND}
            GROUP BY memory_id) AS d),
    scored AS (
        SELECT p.memory_id AS id, sum(
            w.idf * p.tf * CAST({BM25_K1} + 1 AS float8)
            / (p.tf + CAST({BM25_K1} AS float8)
               * (CAST(1 - {BM25_B} AS float8) + CAST({BM25_B} AS float8) * p.dl / avgdl.v))
        ) AS score
        FROM w CROSS JOIN LATERAL (
            SELECT memory_id, tf, dl FROM memory_terms
            WHERE user_id = $1 AND term = w.term AND {_OF_KIND} OFFSET 0) AS p
        CROSS JOIN avgdl
        GROUP BY p.memory_id
        ORDER BY score DESC, p.memory_id
        LIMIT CAST($4 AS integer) + 16)
    SELECT m.*, scored.score
    FROM scored CROSS JOIN LATERAL (
        SELECT {SEARCH_COLUMNS} FROM memories m WHERE m.id = scored.id OFFSET 0) AS m
    WHERE m.superseded_by IS NULL AND (m.expires_at IS NULL OR m.expires_at > now())
    ORDER BY scored.score DESC, m.id
    LIMIT $4
"""

# lexical_for_user: a memory search's user lookup and its lexical leg in one round trip
# ($1 the user's external id, $2-$4 as LEXICAL's, $5 the tenant): LEXICAL run for the
# user the lookup finds (its "$1", the user's internal id, becomes the found ``u.id``).
# Every row carries the user's internal id (``user_pk``): one row per hit, or one row
# with no memory when nothing matched (or there were no terms); no row: no such user.
LEXICAL_FOR_USER = f"""
    WITH u AS MATERIALIZED (
        SELECT id FROM users WHERE tenant_id = $5 AND external_id = $1)
    SELECT u.id AS user_pk, hit.*
    FROM u LEFT JOIN LATERAL ({LEXICAL.replace("$1", "u.id")}) AS hit ON true
"""

# turns_and_pinned: the single-turn memories of given (session, seq) pairs of one user,
# through memories_turn_idx (how an episode hit is shown turn by turn, and how the other
# half of a question/answer pair is found), and the high-stakes memories every context
# shows, the pinned ones (pinned through the API, never expire) first, then promoted
# ones (they expire): one round trip for the last two reads of the memory block,
# through the driver ($1 user, $2 session pks, $3 seqs). The turns come in the order
# of the pairs asked for (their priority): the caller breaks ties in value by it, so a
# context does not depend on the join Postgres picks (a hash join of the pairs returns
# the rows in the order of the index it reads).
TURNS_AND_PINNED = f"""
    SELECT * FROM (
        SELECT {MEMORY_COLUMNS}, false AS high_stakes, w.position
        FROM unnest(CAST($2 AS bigint[]), CAST($3 AS integer[]))
             WITH ORDINALITY AS w(sid, seq, position)
        JOIN memories m ON m.session_id = w.sid AND m.turn_seq = w.seq
        WHERE m.user_id = $1 AND m.superseded_by IS NULL
        UNION ALL
        (SELECT {MEMORY_COLUMNS}, true,
                row_number() OVER (ORDER BY m.pinned DESC, m.created_at, m.id)
         FROM memories m
         WHERE m.user_id = $1 AND m.superseded_by IS NULL AND m.kind = 'high_stakes'
           AND (m.expires_at IS NULL OR m.expires_at > now())
         ORDER BY m.pinned DESC, m.created_at, m.id
         LIMIT 20)) AS both_reads
    ORDER BY high_stakes, position
"""

DELETE_MEMORY = text("DELETE FROM memories WHERE id = :id AND user_id = :user_pk RETURNING id")


# sweep_expired: hard-delete memories past their expiry (pinned ones have none).
SWEEP_EXPIRED = text("""
    DELETE FROM memories WHERE id IN (
        SELECT id FROM memories WHERE expires_at IS NOT NULL AND expires_at <= now()
        LIMIT :batch)
    RETURNING id
""")

# pending_embeddings: the memories of some users of one tenant still without a vector.
PENDING_EMBEDDINGS = text("""
    SELECT id, text FROM memories
    WHERE tenant_id = :tenant AND user_id = ANY(CAST(:user_pks AS bigint[]))
      AND embedding IS NULL AND superseded_by IS NULL
    ORDER BY id LIMIT :batch
""")

# set_embeddings: the vectors of many memories of one tenant in one statement (with
# their half-precision copies). A memory another worker embedded meanwhile keeps its
# vector: each memory is embedded once. A heavy user's memory goes into the HNSW index.
SET_EMBEDDINGS = text(f"""
    WITH v AS (
        SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:embeddings AS vector[]))
            AS v(id, embedding)),
    m AS (
        UPDATE memories SET embedding = v.embedding, embedding_model = :model,
                            embedding_dim = :dim,
                            ann = memories.ann OR {heavy_user("memories.user_id")}
        FROM v
        WHERE memories.id = v.id AND memories.tenant_id = :tenant AND memories.embedding IS NULL
        RETURNING memories.id, memories.user_id, memories.kind, memories.embedding)
    {VECTOR_COPY}
""")

SET_EMBEDDING = text(f"""
    WITH m AS (
        UPDATE memories SET embedding = :embedding, embedding_model = :model,
                            embedding_dim = :dim,
                            ann = memories.ann OR {heavy_user("memories.user_id")}
        WHERE id = :id
        RETURNING id, user_id, kind, embedding)
    {VECTOR_COPY}
""")

# flip_heavy: one batch of the move of some users' rows (one tenant) into the HNSW index:
# up to :batch rows outside the index of the users that are heavy, that is with more
# than :heavy_at live memories (a bounded count) or with rows in the index already. A
# user's move is a run of these batches, each its own short transaction (``memory_jobs.
# move_heavy``): the rows a batch holds are held for its graph inserts alone (~2 ms a
# row), so a write to the user waits at most one batch, never the whole move (5,000+
# rows, ~10 s). Once a batch has committed the user counts as moved (its new rows go
# into the index, ``heavy_user``), so a move cut short (a crash, a kill) is finished by
# the user's next one; a batch takes only rows outside the index, so running one twice
# moves nothing twice. A row another transaction holds is skipped (SKIP LOCKED: a move
# never waits, and never deadlocks with a write); the user's next move takes it. The
# search never depends on any of it (VECTOR_HNSW ranks the rows outside exactly).
FLIP_HEAVY = text("""
    WITH u AS (
        SELECT DISTINCT id FROM unnest(CAST(:user_pks AS bigint[])) AS u(id)),
    heavy AS (
        SELECT u.id FROM u
        WHERE EXISTS (SELECT 1 FROM memories WHERE user_id = u.id AND NOT ann)
          AND (EXISTS (SELECT 1 FROM memories WHERE user_id = u.id AND ann)
               OR (SELECT count(*) FROM (
                       SELECT 1 FROM memories WHERE user_id = u.id AND superseded_by IS NULL
                       LIMIT CAST(:heavy_at AS integer) + 1) AS bounded)
                  > CAST(:heavy_at AS integer))),
    moved AS (
        UPDATE memories SET ann = true
        WHERE id IN (SELECT m.id FROM memories m JOIN heavy ON m.user_id = heavy.id
                     WHERE m.tenant_id = :tenant AND NOT m.ann
                     LIMIT CAST(:batch AS integer)
                     FOR NO KEY UPDATE OF m SKIP LOCKED)
        RETURNING id)
    SELECT count(*) FROM moved
""")

STORED_MODELS = text("""
    SELECT DISTINCT embedding_model, embedding_dim FROM memories
    WHERE tenant_id = :tenant AND embedding_model IS NOT NULL
""")


async def insert_memory(
    conn: AsyncConnection,
    *,
    tenant: str,
    user_pk: int,
    kind: str,
    text_: str,
    text_key: str,
    pinned: bool,
    ttl_days: int | None,
    source: dict[str, Any],
    metadata: dict[str, Any],
    terms: list[str],
    session_pk: int | None = None,
    turn_seq: int | None = None,
    embedding: list[float] | None = None,
    model: str | None = None,
) -> int:
    return int(
        (
            await conn.execute(
                INSERT_MEMORY,
                {
                    "tenant": tenant,
                    "user_pk": user_pk,
                    "kind": kind,
                    "text": text_,
                    "text_key": text_key,
                    "pinned": pinned,
                    "ttl_days": ttl_days,
                    "source": source,
                    "metadata": metadata,
                    "session_pk": session_pk,
                    **postings(terms),
                    "embedding": embedding,
                    "model": model,
                    "dim": None if embedding is None else len(embedding),
                    "turn_seq": turn_seq,
                },
            )
        ).scalar_one()
    )


@dataclass(frozen=True)
class AddedRow:
    memory: MemoryRow
    created: bool  # False: a live memory of the same wording was confirmed instead
    user_pk: int


@dataclass(frozen=True)
class MemoryToAdd:
    """What ``add_memory`` writes: a memory of a user named by tenant and external id,
    its postings (``terms``, with repeats) and its embedding job (``embed_job``,
    deduplicated per user: ``embed_key_prefix`` + the user's id)."""

    tenant: str
    user: str
    kind: str
    text: str
    text_key: str
    pinned: bool
    ttl_days: int | None
    source: dict[str, Any]
    metadata: dict[str, Any]
    terms: list[str]
    embed_job: queue.JobWanted
    embed_key_prefix: str

    def arguments(self) -> list[Any]:
        """``ADD_MEMORY_ON_DRIVER``'s arguments, in order."""
        params = {
            "tenant": self.tenant,
            "user": self.user,
            "kind": self.kind,
            "text": self.text,
            "text_key": self.text_key,
            "pinned": self.pinned,
            "ttl_days": self.ttl_days,
            "source": self.source,
            "metadata": self.metadata,
            **postings(self.terms),
            **queue.within_params(
                tenant_id=self.tenant,
                kind=self.embed_job.kind,
                max_attempts=self.embed_job.max_attempts,
                delay_s=self.embed_job.delay_s,
            ),
            "job_key_prefix": self.embed_key_prefix,
        }
        return [params[name] for name in ADD_MEMORY_ON_DRIVER[1]]


async def add_memory(conn: Connection, memory: MemoryToAdd) -> AddedRow | None:
    """The added (or confirmed) memory; None when the user does not exist yet. A new
    memory's embedding job is enqueued by the same statement.

    One statement, atomic on its own, sent on the driver connection: for an autocommit
    connection (or the driver's own), not inside a SQLAlchemy transaction, which it
    would not be part of."""
    r = await (await _driver(conn)).fetchrow(ADD_MEMORY_ON_DRIVER[0], *memory.arguments())
    if r is None:
        return None
    return AddedRow(memory=_row(r), created=r["created"], user_pk=r["user_id"])


async def confirm(conn: AsyncConnection, *, memory_id: int, user_pk: int, pinned: bool) -> None:
    await conn.execute(CONFIRM, {"id": memory_id, "user_pk": user_pk, "pinned": pinned})


async def supersede(conn: AsyncConnection, *, old_id: int, new_id: int, user_pk: int) -> None:
    await conn.execute(SUPERSEDE, {"id": old_id, "new_id": new_id, "user_pk": user_pk})


async def list_memories(
    conn: AsyncConnection, *, user_pk: int, kind: str | None, limit: int
) -> list[MemoryRow]:
    rows = await conn.execute(LIST_MEMORIES, {"user_pk": user_pk, "kind": kind, "limit": limit})
    return [_row(r._mapping) for r in rows]


async def vector_search(
    conn: Connection,
    *,
    user_pk: int,
    query: list[float],
    model: str,
    k: int,
    kind: str | None = None,
) -> list[MemoryRow]:
    """The user's k nearest live memories; exact for ordinary users (see module doc)."""
    ranking = await vector_ranking(conn, user_pk=user_pk, query=query, model=model, k=k, kind=kind)
    return ranking.rows()


async def vector_ranking(
    conn: Connection,
    *,
    user_pk: int,
    query: list[float],
    model: str,
    k: int,
    kind: str | None = None,
) -> Ranking:
    """``vector_search``'s memories, unbuilt."""
    db = await _driver(conn)
    args = (user_pk, query, model, kind, k)
    routed = await db.fetch(await _routed_statement(db), *args, EXACT_SCAN_MAX)
    count = int(routed[0]["live"])
    if count <= EXACT_SCAN_MAX:
        rows = [r for r in routed if r["id"] is not None]
        if len(rows) < k and routed[0]["near"] == k + NEAR_SLACK:
            return Ranking(await db.fetch(VECTOR_EXACT, *args))  # the slack ran out
        return Ranking(rows, start=2)  # after "live" and "near"
    # The settings are transaction-local: a transaction of the driver's own holds them
    # (a savepoint inside the caller's transaction; a transaction on an autocommit one).
    async with db.transaction():
        await db.execute(HNSW_SETTINGS, str(max(HNSW_EF_SEARCH, k)), str(HNSW_MAX_SCAN_TUPLES))
        rows = await db.fetch(VECTOR_HNSW, *args)
        await db.execute(SEQSCAN_BACK_ON)
    in_index = sum(1 for r in rows if r["in_index"])
    if len(rows) < min(k, count) or (rows and rows[0]["indexed"] and in_index < k):
        rows = await db.fetch(VECTOR_EXACT, *args)  # never silently short
    return Ranking(sorted(rows, key=lambda r: -float(r["score"]))[:k])


async def lexical_search(
    conn: Connection, *, user_pk: int, terms: list[str], k: int, kind: str | None = None
) -> list[MemoryRow]:
    ranking = await lexical_ranking(conn, user_pk=user_pk, terms=terms, k=k, kind=kind)
    return ranking.rows()


async def lexical_ranking(
    conn: Connection, *, user_pk: int, terms: list[str], k: int, kind: str | None = None
) -> Ranking:
    """``lexical_search``'s memories, unbuilt."""
    if not terms:
        return Ranking([])
    return Ranking(await (await _driver(conn)).fetch(LEXICAL, user_pk, terms, kind, k))


async def lexical_search_for_user(
    conn: Connection,
    *,
    tenant: str,
    user: str,
    terms: list[str],
    k: int,
    kind: str | None = None,
) -> tuple[int, list[MemoryRow]] | None:
    """The user's internal id and ``lexical_search``'s memories for it, in one round
    trip; None when the tenant has no such user."""
    found = await lexical_ranking_for_user(
        conn, tenant=tenant, user=user, terms=terms, k=k, kind=kind
    )
    return None if found is None else (found[0], found[1].rows())


async def lexical_ranking_for_user(
    conn: Connection,
    *,
    tenant: str,
    user: str,
    terms: list[str],
    k: int,
    kind: str | None = None,
) -> tuple[int, Ranking] | None:
    """``lexical_search_for_user``'s memories, unbuilt."""
    rows = await (await _driver(conn)).fetch(LEXICAL_FOR_USER, user, terms, kind, k, tenant)
    if not rows:
        return None
    return int(rows[0]["user_pk"]), Ranking([r for r in rows if r["id"] is not None], start=1)


async def turns_and_pinned(
    conn: Connection, *, user_pk: int, pairs: list[tuple[int, int]]
) -> tuple[list[MemoryRow], list[MemoryRow]]:
    """The single-turn memories of ``(session pk, seq)`` pairs (those that exist, in
    the order of ``pairs``), and the user's high-stakes memories (pinned first)."""
    rows = await (await _driver(conn)).fetch(
        TURNS_AND_PINNED, user_pk, [p[0] for p in pairs], [p[1] for p in pairs]
    )
    turns: list[MemoryRow] = []
    pinned: list[MemoryRow] = []
    for r in rows:
        (pinned if r["high_stakes"] else turns).append(_row_at(r, 0))
    return turns, pinned


async def delete_memory(conn: AsyncConnection, *, user_pk: int, memory_id: int) -> bool:
    found = await conn.execute(DELETE_MEMORY, {"id": memory_id, "user_pk": user_pk})
    return found.first() is not None


async def sweep_expired(conn: AsyncConnection, *, batch: int = 10_000) -> int:
    return len((await conn.execute(SWEEP_EXPIRED, {"batch": batch})).all())


async def pending_embeddings(
    conn: AsyncConnection, *, tenant: str, user_pks: list[int], batch: int
) -> list[tuple[int, str]]:
    rows = await conn.execute(
        PENDING_EMBEDDINGS, {"tenant": tenant, "user_pks": user_pks, "batch": batch}
    )
    return [(r.id, r.text) for r in rows]


async def set_embeddings(
    conn: AsyncConnection,
    *,
    tenant: str,
    embeddings: list[tuple[int, list[float]]],
    model: str,
) -> None:
    """Write ``(memory id, vector)`` pairs of one tenant's memories, in one statement."""
    if not embeddings:
        return
    await conn.execute(
        SET_EMBEDDINGS,
        {
            "tenant": tenant,
            "ids": [memory_id for memory_id, _ in embeddings],
            "embeddings": [Vector(vector) for _, vector in embeddings],
            "model": model,
            "dim": len(embeddings[0][1]),
        },
    )


async def set_embedding(
    conn: AsyncConnection, *, memory_id: int, embedding: list[float], model: str
) -> None:
    await conn.execute(
        SET_EMBEDDING,
        {
            "id": memory_id,
            "embedding": embedding,
            "model": model,
            "dim": len(embedding),
        },
    )


async def flip_heavy(
    conn: AsyncConnection, *, tenant: str, user_pks: Sequence[int], batch: int = FLIP_BATCH
) -> int:
    """One batch (``FLIP_HEAVY``) of the move into the HNSW index of the rows of those of
    ``user_pks`` that are heavy; returns how many rows moved (fewer than ``batch``: none
    left, or the rest held by writers)."""
    params = {
        "tenant": tenant,
        "user_pks": sorted(set(user_pks)),
        "heavy_at": EXACT_SCAN_MAX,
        "batch": batch,
    }
    return int((await conn.execute(FLIP_HEAVY, params)).scalar_one())


async def stored_models(conn: AsyncConnection, *, tenant: str) -> list[tuple[str, int]]:
    return [
        (r.embedding_model, r.embedding_dim)
        for r in await conn.execute(STORED_MODELS, {"tenant": tenant})
    ]


async def drop_open_episodes(conn: AsyncConnection, *, tenant: str, session_pk: int) -> None:
    await conn.execute(DROP_OPEN_EPISODES, {"tenant": tenant, "sid": session_pk})


@dataclass(frozen=True)
class IndexedMemory:
    """An episode or single turn an index run writes (``insert_indexed``)."""

    user_pk: int
    session_pk: int
    text: str
    text_key: str
    source: dict[str, Any]
    metadata: dict[str, Any]
    terms: list[str]
    turn_seq: int | None
    embedding: list[float]


async def insert_indexed(
    conn: AsyncConnection,
    *,
    tenant: str,
    rows: Sequence[IndexedMemory],
    ttl_days: int | None,
    model: str,
) -> int:
    """Write ``rows`` (of one tenant) with their postings and vector copies, in one
    statement; returns how many were written."""
    if not rows:
        return 0
    posting_rows: list[int] = []
    posting_terms: list[str] = []
    posting_tfs: list[int] = []
    for position, row in enumerate(rows, start=1):
        counted = postings(row.terms)
        posting_rows += [position] * len(counted["posting_terms"])
        posting_terms += counted["posting_terms"]
        posting_tfs += counted["posting_tfs"]
    params = {
        "tenant": tenant,
        "user_pks": [r.user_pk for r in rows],
        "session_pks": [r.session_pk for r in rows],
        "texts": [r.text for r in rows],
        "text_keys": [r.text_key for r in rows],
        "sources": [r.source for r in rows],
        "metadatas": [r.metadata for r in rows],
        "turn_seqs": [r.turn_seq for r in rows],
        "embeddings": [Vector(r.embedding) for r in rows],
        "dls": [max(1, len(r.terms)) for r in rows],
        "posting_rows": posting_rows,
        "posting_terms": posting_terms,
        "posting_tfs": posting_tfs,
        "ttl_days": ttl_days,
        "model": model,
        "dim": len(rows[0].embedding),
    }
    return int((await conn.execute(INSERT_INDEXED, params)).scalar_one())


@dataclass(frozen=True)
class Neighbour:
    id: int
    kind: str
    text: str
    embedding: list[float]


async def similar_existing(
    conn: AsyncConnection, *, user_pk: int, model: str, query: list[float], k: int
) -> list[Neighbour]:
    rows = await conn.execute(
        SIMILAR_EXISTING, {"user_pk": user_pk, "model": model, "k": k, "q": query}
    )
    return [Neighbour(id=r.id, kind=r.kind, text=r.text, embedding=r.embedding) for r in rows]


async def other_models(conn: AsyncConnection, *, model: str) -> list[tuple[str, int]]:
    """Embedding models other than ``model`` found on stored memories, with their counts."""
    return [(r.embedding_model, r.n) for r in await conn.execute(OTHER_MODELS, {"model": model})]


async def forget_embeddings(conn: AsyncConnection, *, model: str) -> list[tuple[str, int]]:
    """Drop vectors not made by ``model``; (tenant, user pk) of each memory changed."""
    rows = await conn.execute(FORGET_EMBEDDINGS, {"model": model})
    return [(r.tenant_id, r.user_id) for r in rows]


# set_pinned: pin (never expires) or unpin (expires its ttl after its last confirmation;
# a memory with no ttl keeps none).
SET_PINNED = text("""
    UPDATE memories SET pinned = :pinned,
        expires_at = CASE WHEN :pinned OR ttl_days IS NULL THEN NULL
                          ELSE greatest(last_confirmed_at + make_interval(days => ttl_days),
                                        now() + interval '1 day') END
    WHERE id = :id AND user_id = :user_pk AND superseded_by IS NULL
    RETURNING id
""")


async def set_pinned(conn: AsyncConnection, *, user_pk: int, memory_id: int, pinned: bool) -> bool:
    found = await conn.execute(SET_PINNED, {"id": memory_id, "user_pk": user_pk, "pinned": pinned})
    return found.first() is not None


@dataclass(frozen=True)
class EmbeddingProgress:
    missing: int  # live memories without a vector
    waiting_jobs: int  # embedding jobs queued or running
    dead_jobs: int


# embedding_progress: what `mnemo reembed --wait` watches.
EMBEDDING_PROGRESS = text("""
    SELECT (SELECT count(*) FROM memories
             WHERE embedding IS NULL AND superseded_by IS NULL) AS missing,
           (SELECT count(*) FROM jobs
             WHERE kind = 'embed_memories' AND status IN ('queued', 'running')) AS waiting_jobs,
           (SELECT count(*) FROM jobs
             WHERE kind = 'embed_memories' AND status = 'dead') AS dead_jobs
""")


async def embedding_progress(conn: AsyncConnection) -> EmbeddingProgress:
    row = (await conn.execute(EMBEDDING_PROGRESS)).one()
    return EmbeddingProgress(row.missing, row.waiting_jobs, row.dead_jobs)


# forget_indexed_from: a pop removed the turn at :seq. The session's index rows that cover
# it go (episodes, whose windows overlap, and its single-turn row); indexing restarts
# before the first turn of the earliest episode that went, so the turns it also covered
# are chunked again, and the single-turn rows past that cut go too (the next run writes
# them again). Returns the cut.
FORGET_INDEXED_FROM = text("""
    WITH spans AS (
        SELECT m.id, m.turn_seq,
               (SELECT min(x::int) FROM jsonb_array_elements_text(m.source -> 'seqs') x) AS first,
               (SELECT max(x::int) FROM jsonb_array_elements_text(m.source -> 'seqs') x) AS last
        FROM memories m
        WHERE m.tenant_id = :tenant AND m.session_id = :sid AND m.kind = 'episode'),
    cut AS (
        SELECT least(CAST(:seq AS integer),
                     min(first) FILTER (WHERE last >= CAST(:seq AS integer))) - 1 AS mark
        FROM spans),
    gone AS (
        DELETE FROM memories m USING spans, cut
        WHERE m.id = spans.id
          AND (spans.last >= CAST(:seq AS integer) OR spans.turn_seq > cut.mark)
        RETURNING m.id)
    SELECT cut.mark, (SELECT count(*) FROM gone) AS dropped FROM cut
""")


async def forget_indexed_from(
    conn: AsyncConnection, *, tenant: str, session_pk: int, seq: int
) -> int:
    """Drop the index rows derived from the turn at ``seq`` (and the single-turn rows the
    next run rewrites); the seq indexing restarts after."""
    row = (
        await conn.execute(FORGET_INDEXED_FROM, {"tenant": tenant, "sid": session_pk, "seq": seq})
    ).one()
    return int(row.mark)

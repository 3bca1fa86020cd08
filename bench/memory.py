"""Vector search over many users' memories: the production path against HNSW-then-filter.

    python -m bench.memory --out memory.json [--users U --per-user M --k 10
                                             --queries Q --heavy H --seed S
                                             --storage default|plain] [--scale]

Starts a fresh embedded Postgres (pgvector) in a temporary directory, migrates it,
and bulk-loads U users × M memories on average (binary COPY) with synthetic unit
vectors: shared topic centres, a few topics per user, a per-user offset and noise,
so that a user's memories cluster and many users share each topic (the ANN graph
is not trivially separable by user). Sizes per user are uneven (log-normal, some
users with fewer than k memories), three probe users hold 1,000, 2,500 and
``repo.EXACT_SCAN_MAX`` memories, and H heavy users hold more than that, so both
branches of ``vector_search`` run.
The HNSW index is dropped before the load and rebuilt after it (the build time is
reported), then ``VACUUM ANALYZE``. Before the build, the heavy users' rows are marked
for the index by the worker's own move (``memory_jobs.move_heavy``): the index holds
only their rows, as in production.

For Q queries (each drawn like a memory of a random user; a quarter on heavy
users) it measures, interleaved:

* ``vector_search`` — the production function, on an ``AsyncEngine`` connection,
  timed around the call (count + SETs + query + top-up), with a per-statement
  breakdown from SQLAlchemy cursor events;
* HNSW-then-filter — what mem0 does on pgvector: ``hnsw.iterative_scan = off``,
  the default ``ef_search = 40``, and the user filter on an unindexed expression
  (``user_id + 0``, as mem0's ``payload->>'user_id'``), so the planner scans the
  global HNSW index and filters its 40 candidates afterwards.

Both are judged against the exact top k of that user (numpy over the generated
vectors): results per search (must be ``min(k, user's memories)``) and recall@k.
A third series runs ``vector_search`` on heavy users with a rare ``kind`` filter,
and a scan curve (run last) times ``vector_search`` on users of growing size both as
an ordinary user (exact) and as a heavy one (HNSW, the user's rows put in the index
first), query by query: the evidence for ``EXACT_SCAN_MAX``.

``--scale`` is the issue's target, 1M memories across 10k users. Vectors have the
schema's width (``EMBEDDING_DIM``, 512): the production statements cast to it, so
the same SQL runs against the same tables, indexes and planner. The loader fills
``memory_vectors`` (the half-precision copies the ranking reads) as migration 0009
does.
``--storage plain`` sets the column's storage to PLAIN before the load (a what-if:
512-d vectors otherwise go to TOAST, see the report).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector
from sqlalchemy import TextClause, event, make_url, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.schema import CreateIndex

from app.services.memory_jobs import move_heavy
from app.stores import memories as repo
from app.stores.embedded import throwaway_embedded
from app.stores.engine import driver_connection, install_codecs
from app.stores.migrate import upgrade_to_head
from app.stores.tables import EMBEDDING_DIM, memories
from bench.latency import machine

TENANT = "bench"
MODEL = "bench-synthetic"
KINDS = ("fact", "episode", "preference", "profile", "rule", "high_stakes")
KIND_P = (0.45, 0.30, 0.12, 0.08, 0.04, 0.01)
RARE_KIND = "rule"
POST_FILTER_EF_SEARCH = 40  # pgvector's default, which mem0 does not change
TARGETS = {"p99_ms": 20.0, "recall_at_k": 0.95}

# HNSW-then-filter: one global ANN scan, the user filter applied to its candidates.
# "user_id + 0" keeps the btree out of the plan, as mem0's unindexed jsonb filter does.
POST_FILTER = text(f"""
    SELECT {repo.MEMORY_COLUMNS}, 1 - (m.embedding <=> :q) AS score
    FROM memories m
    WHERE m.user_id + 0 = :user_pk
    ORDER BY m.embedding <=> :q
    LIMIT :k
""")

# HNSW-then-filter scans a global index of every row (what mem0's store builds): the
# schema's index holds only heavy users' rows, so the benchmark builds one for it. The
# production statements say ``m.ann`` and read the smaller, partial index (their plans
# are in the report: ``plans``).
CREATE_GLOBAL_HNSW = (
    "CREATE INDEX bench_global_hnsw_idx ON memories USING hnsw (embedding vector_cosine_ops)"
)
# The schema's own HNSW index (a partial one: the heavy users' rows).
CREATE_HNSW = str(
    CreateIndex(
        next(i for i in memories.indexes if i.name == "memories_embedding_hnsw_idx")
    ).compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
)


@dataclass(frozen=True)
class Params:
    users: int
    per_user: int
    dim: int
    k: int
    queries: int
    heavy: int
    seed: int
    storage: str
    scale: bool
    maintenance_work_mem: str
    topics: int = 0
    exact_scan_max: int = repo.EXACT_SCAN_MAX


@dataclass
class Corpus:
    """The generated memories: row i belongs to user owner[i] and has kind kinds[i]."""

    sizes: np.ndarray  # memories per user
    vectors: np.ndarray  # (N, dim) float32, unit rows
    owner: np.ndarray  # (N,) user index
    kinds: np.ndarray  # (N,) index into KINDS
    centres: np.ndarray
    user_topics: list[np.ndarray]
    user_offset: np.ndarray
    rows_of: list[np.ndarray] = field(default_factory=list)  # row indices per user


# --- synthetic data (pure) ------------------------------------------------------------


def plan_sizes(p: Params, rng: np.random.Generator) -> np.ndarray:
    """Memories per user: H heavy users above EXACT_SCAN_MAX, the rest log-normal."""
    total = p.users * p.per_user
    heavy = np.zeros(0, dtype=np.int64)
    top = 10.0
    while p.heavy:  # heavy users hold at most ~30 % of all memories
        heavy = (np.geomspace(1.2, top, p.heavy) * p.exact_scan_max).astype(np.int64)
        if heavy.sum() <= 0.3 * total or top <= 1.3:
            break
        top *= 0.9
    light_n = p.users - p.heavy
    raw = rng.lognormal(mean=0.0, sigma=1.0, size=light_n)
    light = np.clip(np.rint(raw / raw.sum() * (total - heavy.sum())), 1, p.exact_scan_max)
    probes = [1000, 2500, p.exact_scan_max]  # medium users: the exact path near its limit
    if light_n >= 10 * len(probes) and light.sum() > 2 * sum(probes):
        light[: len(probes)] = probes
    sizes = np.concatenate([light.astype(np.int64), heavy])
    return np.asarray(rng.permutation(sizes), dtype=np.int64)


def unit(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / np.linalg.norm(x, axis=-1, keepdims=True), dtype=np.float32)


def generate(p: Params, rng: np.random.Generator) -> Corpus:
    sizes = plan_sizes(p, rng)
    topics = p.topics or max(64, p.users // 4)
    centres = unit(rng.standard_normal((topics, p.dim), dtype=np.float32))
    user_topics = [
        rng.choice(topics, size=int(rng.integers(1, 5) if n <= p.exact_scan_max else 16))
        for n in sizes
    ]
    user_offset = rng.standard_normal((len(sizes), p.dim), dtype=np.float32) * (
        0.5 / np.sqrt(p.dim)
    )
    owner = np.repeat(np.arange(len(sizes)), sizes)
    n = len(owner)
    kinds = rng.choice(len(KINDS), size=n, p=KIND_P)
    vectors = np.empty((n, p.dim), dtype=np.float32)
    ntop = np.array([len(t) for t in user_topics])
    tmat = np.zeros((len(sizes), 16), dtype=np.int64)
    for u, t in enumerate(user_topics):
        tmat[u, : len(t)] = t
    for start in range(0, n, 50_000):
        o = owner[start : start + 50_000]
        pick = (rng.random(len(o)) * ntop[o]).astype(np.int64)
        noise = rng.standard_normal((len(o), p.dim), dtype=np.float32)
        scale = rng.uniform(0.7, 1.3, size=(len(o), 1)).astype(np.float32) / np.sqrt(p.dim)
        vectors[start : start + len(o)] = unit(
            centres[tmat[o, pick]] + user_offset[o] + noise * scale
        )
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    rows_of = [np.arange(bounds[u], bounds[u + 1]) for u in range(len(sizes))]
    return Corpus(sizes, vectors, owner, kinds, centres, user_topics, user_offset, rows_of)


def query_vector(c: Corpus, user: int, rng: np.random.Generator) -> np.ndarray:
    """A query drawn like one of the user's memories: about something they talked of."""
    dim = c.vectors.shape[1]
    topic = c.user_topics[user][rng.integers(len(c.user_topics[user]))]
    noise = rng.standard_normal(dim, dtype=np.float32) * (rng.uniform(0.7, 1.3) / np.sqrt(dim))
    return unit(c.centres[topic] + c.user_offset[user] + noise)


def exact_top(c: Corpus, user: int, q: np.ndarray, k: int, kind: int | None = None) -> list[int]:
    """Row indices of the user's k nearest memories by cosine (vectors are unit)."""
    rows = c.rows_of[user]
    if kind is not None:
        rows = rows[c.kinds[rows] == kind]
    sims = c.vectors[rows] @ q
    order = np.argsort(-sims, kind="stable")[:k]
    return [int(r) for r in rows[order]]


def pct(xs: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(xs), q)), 3) if xs else float("nan")


# --- database ---------------------------------------------------------------------------


async def raw_connect(url: str) -> asyncpg.Connection:
    u = make_url(url)
    conn = await asyncpg.connect(
        host=u.query.get("host") or u.host,
        port=u.port,
        user=u.username,
        password=u.password or None,
        database=u.database,
    )
    await register_vector(conn)
    return conn


async def load(url: str, p: Params, c: Corpus) -> dict[str, Any]:
    """Users and memories by binary COPY, then the HNSW build (timed) and VACUUM ANALYZE."""
    conn = await raw_connect(url)
    try:
        await conn.execute("DROP INDEX memories_embedding_hnsw_idx")
        if p.storage == "plain":
            await conn.execute("ALTER TABLE memories ALTER COLUMN embedding SET STORAGE PLAIN")
        user_pks = await conn.fetch(
            "INSERT INTO users (tenant_id, external_id)"
            " SELECT $1, 'u' || g FROM generate_series(0, $2 - 1) g RETURNING id, external_id",
            TENANT,
            len(c.sizes),
        )
        pk_of = {int(r["external_id"][1:]): int(r["id"]) for r in user_pks}
        began = time.perf_counter()
        chunk = 20_000
        for start in range(0, len(c.owner), chunk):
            records = [
                (
                    i + 1,
                    TENANT,
                    pk_of[int(c.owner[i])],
                    KINDS[int(c.kinds[i])],
                    f"memory {i}",
                    f"k{i}",
                    c.vectors[i],
                    MODEL,
                    p.dim,
                )
                for i in range(start, min(start + chunk, len(c.owner)))
            ]
            await conn.copy_records_to_table(
                "memories",
                records=records,
                columns=[
                    "id",
                    "tenant_id",
                    "user_id",
                    "kind",
                    "text",
                    "text_key",
                    "embedding",
                    "embedding_model",
                    "embedding_dim",
                ],
            )
        # The half-precision copies the production ranking reads (as migration 0009's
        # backfill writes them: a user's rows side by side).
        await conn.execute(
            "INSERT INTO memory_vectors (memory_id, user_id, kind, embedding)"
            f" SELECT id, user_id, kind, CAST(embedding AS halfvec({EMBEDDING_DIM}))"
            " FROM memories ORDER BY user_id, id"
        )
        copy_s = time.perf_counter() - began
        began = time.perf_counter()
        # The heavy users only: a move's batch tests every user it is given for heaviness
        # (a bounded count of each one's rows), and the others would move nothing.
        heavy = [pk_of[int(u)] for u in np.flatnonzero(c.sizes > p.exact_scan_max)]
        moved = await mark_heavy(url, heavy)
        mark_s = time.perf_counter() - began
        workers = max(1, (os.cpu_count() or 2) - 1)
        await conn.execute(f"SET maintenance_work_mem = '{p.maintenance_work_mem}'")
        await conn.execute(f"SET max_parallel_maintenance_workers = {workers}")
        notices: list[str] = []
        conn.add_log_listener(lambda _c, msg: notices.append(str(msg)))
        began = time.perf_counter()
        await conn.execute(CREATE_HNSW)
        build_s = time.perf_counter() - began
        began = time.perf_counter()
        await conn.execute(CREATE_GLOBAL_HNSW)
        global_build_s = time.perf_counter() - began
        began = time.perf_counter()
        await conn.execute("VACUUM ANALYZE memories")
        await conn.execute("VACUUM ANALYZE memory_vectors")
        await conn.execute("VACUUM ANALYZE users")
        vacuum_s = time.perf_counter() - began
        sizes = await conn.fetchrow("""
            SELECT pg_total_relation_size('memories') AS total,
                   pg_relation_size('memories') AS heap,
                   coalesce(pg_total_relation_size(NULLIF(reltoastrelid, 0)), 0) AS toast,
                   pg_relation_size('memories_embedding_hnsw_idx') AS hnsw,
                   pg_relation_size('bench_global_hnsw_idx') AS global_hnsw,
                   pg_relation_size('memories_user_live_idx') AS user_btree,
                   pg_database_size(current_database()) AS database
            FROM pg_class WHERE oid = 'memories'::regclass
        """)
        settings = {
            name: await conn.fetchval(f"SHOW {name}")
            for name in ("server_version", "shared_buffers", "work_mem", "jit")
        }
        settings["pgvector"] = await conn.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        )
    finally:
        await conn.close()
    mib = {key: round(v / 2**20, 1) for key, v in dict(sizes).items()}
    return {
        "rows": len(c.owner),
        "users": len(c.sizes),
        "user_pk": pk_of,
        "copy_s": round(copy_s, 1),
        "copy_rows_per_s": round(len(c.owner) / copy_s),
        "heavy_rows_marked": moved,
        "mark_heavy_s": round(mark_s, 1),
        "create_hnsw": CREATE_HNSW,
        "hnsw_build_s": round(build_s, 1),
        "hnsw_build_workers": workers,
        "global_hnsw_build_s": round(global_build_s, 1),
        "hnsw_build_notices": notices,
        "vacuum_analyze_s": round(vacuum_s, 1),
        "size_mib": mib,
        "settings": settings,
    }


async def mark_heavy(url: str, user_pks: list[int]) -> int:
    """The rows of the users past EXACT_SCAN_MAX marked for the HNSW index, as the worker
    marks them (before the index is built: no graph insert); how many."""
    engine = create_async_engine(url, pool_size=1)
    install_codecs(engine)
    try:
        return await move_heavy(engine, tenant=TENANT, user_pks=user_pks)
    finally:
        await engine.dispose()


class StatementClock:
    """Times every statement SQLAlchemy sends, to break one search into its parts."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.log: list[tuple[str, float]] = []
        event.listen(engine.sync_engine, "before_cursor_execute", self._before)
        event.listen(engine.sync_engine, "after_cursor_execute", self._after)

    def _before(self, conn: Any, _cursor: Any, *_: Any) -> None:
        conn.info["bench_t0"] = time.perf_counter()

    def _after(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.log.append((statement, (time.perf_counter() - conn.info["bench_t0"]) * 1000))

    def take(self) -> dict[str, float]:
        """Milliseconds per part of the search just run: count, set, hnsw, exact."""
        parts: dict[str, float] = {}
        for statement, ms in self.log:
            if "count(*)" in statement:
                part = "count"
            elif statement.lstrip().startswith("SET"):
                part = "set"
            elif "<=>" in statement and "+ 0" in statement:
                part = "exact"
            else:
                part = "hnsw"
            parts[part] = parts.get(part, 0.0) + ms
        self.log.clear()
        return parts


@dataclass
class Series:
    """Latency and quality of one kind of search over many queries."""

    name: str
    latency_ms: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    short: int = 0  # searches returning fewer than min(k, user's rows)
    returned: list[int] = field(default_factory=list)
    expected: list[int] = field(default_factory=list)
    hnsw_path: int = 0
    topups: int = 0
    parts_ms: dict[str, list[float]] = field(default_factory=dict)

    def add(self, ms: float, got: list[int], truth: list[int]) -> None:
        self.latency_ms.append(ms)
        self.returned.append(len(got))
        self.expected.append(len(truth))
        self.short += len(got) < len(truth)
        if truth:
            self.recall.append(len(set(got) & set(truth)) / len(truth))

    def record(self, ms: float, got: list[int], truth: list[int], parts: dict[str, float]) -> None:
        """A production search: also which branch ran and whether it was topped up."""
        self.add(ms, got, truth)
        self.hnsw_path += "hnsw" in parts
        self.topups += "hnsw" in parts and "exact" in parts
        for part, v in parts.items():
            self.parts_ms.setdefault(part, []).append(v)

    def summary(self) -> dict[str, Any]:
        n = len(self.latency_ms)
        out: dict[str, Any] = {
            "searches": n,
            "p50_ms": pct(self.latency_ms, 50),
            "p99_ms": pct(self.latency_ms, 99),
            "max_ms": round(max(self.latency_ms), 3) if n else None,
            "recall_at_k": round(float(np.mean(self.recall)), 4) if self.recall else None,
            "recall_min": round(float(np.min(self.recall)), 4) if self.recall else None,
            "full_results_share": round(1 - self.short / n, 4) if n else None,
            "short_searches": self.short,
            "mean_results": round(float(np.mean(self.returned)), 2) if n else None,
            "mean_expected": round(float(np.mean(self.expected)), 2) if n else None,
        }
        if self.hnsw_path or self.topups:
            out["hnsw_path_searches"] = self.hnsw_path
            out["exact_topups"] = self.topups
        if self.parts_ms:
            out["parts_p50_ms"] = {k: pct(v, 50) for k, v in self.parts_ms.items()}
            out["parts_p99_ms"] = {k: pct(v, 99) for k, v in self.parts_ms.items()}
        return out


async def production(
    engine: AsyncEngine,
    clock: StatementClock,
    user_pk: int,
    q: np.ndarray,
    k: int,
    kind: str | None = None,
) -> tuple[float, list[int], dict[str, float]]:
    async with engine.connect() as conn:
        clock.take()
        began = time.perf_counter()
        rows = await repo.vector_search(
            conn, user_pk=user_pk, query=q.tolist(), model=MODEL, k=k, kind=kind
        )
        ms = (time.perf_counter() - began) * 1000
        await conn.rollback()
    return ms, [r.id - 1 for r in rows], clock.take()


async def post_filter(
    conn: AsyncConnection, user_pk: int, q: np.ndarray, k: int
) -> tuple[float, list[int]]:
    params = {"user_pk": user_pk, "q": q.tolist(), "k": k}
    began = time.perf_counter()
    rows = (await conn.execute(POST_FILTER, params)).all()
    ms = (time.perf_counter() - began) * 1000
    return ms, [int(r.id) - 1 for r in rows]


def vector_args(params: dict[str, Any]) -> tuple[Any, ...]:
    """``params`` in the order of the production vector statements' placeholders
    ($1 user, $2 query vector, $3 model, $4 kind or NULL, $5 k)."""
    return (params["user_pk"], params["q"], params["model"], params["kind"], params["k"])


async def driver_fetch(conn: AsyncConnection, sql: str, params: dict[str, Any]) -> list[Any]:
    """A production vector statement (driver SQL, positional) on ``conn``'s connection."""
    db = await driver_connection(conn)
    return list(await db.fetch(sql, *vector_args(params)))


async def explain(conn: AsyncConnection, sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """The plan's top scan node and what it read, from EXPLAIN (ANALYZE, BUFFERS)."""
    db = await driver_connection(conn)
    plan = await db.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *vector_args(params))
    return plan_summary((json.loads(plan) if isinstance(plan, str | bytes) else plan)[0])


async def explain_text(
    conn: AsyncConnection, statement: TextClause, params: dict[str, Any]
) -> dict[str, Any]:
    """``explain`` for a SQLAlchemy statement with named parameters."""
    sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement.text
    plan = await conn.execute(text(sql), params)
    return plan_summary(plan.scalar_one()[0])


def plan_summary(tree: dict[str, Any]) -> dict[str, Any]:
    """The scan nodes of one EXPLAIN (FORMAT JSON) tree, what they read, and JIT."""

    def scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if "Scan" in node["Node Type"]:
            yield node
        for child in node.get("Plans", []):
            yield from scans(child)

    found = [
        {
            "node": s["Node Type"],
            "index": s.get("Index Name"),
            "rows": s.get("Actual Rows"),
            "removed_by_filter": s.get("Rows Removed by Filter"),
            "shared_hit": s.get("Shared Hit Blocks"),
            "shared_read": s.get("Shared Read Blocks"),
        }
        for s in scans(tree["Plan"])
    ]
    jit = tree.get("JIT")
    return {
        "execution_ms": round(tree["Execution Time"], 3),
        "planning_ms": round(tree["Planning Time"], 3),
        "jit_ms": round(jit["Timing"]["Total"], 3) if jit else None,
        "scans": found,
    }


async def measure(url: str, p: Params, c: Corpus, pk_of: dict[int, int]) -> dict[str, Any]:
    rng = np.random.default_rng(p.seed + 1)
    engine = create_async_engine(url, pool_size=2)
    install_codecs(engine)
    clock = StatementClock(engine)
    # The same function on connections that never use a generic plan (a what-if: asyncpg
    # prepares every statement, and after five runs Postgres may switch to a generic plan
    # that cannot see which user, hence how many rows, the query is about).
    custom = create_async_engine(
        url, pool_size=2, connect_args={"server_settings": {"plan_cache_mode": "force_custom_plan"}}
    )
    install_codecs(custom)
    custom_clock = StatementClock(custom)
    heavy = np.flatnonzero(c.sizes > p.exact_scan_max)
    light = np.flatnonzero(c.sizes <= p.exact_scan_max)
    series = {
        name: Series(name)
        for name in (
            "light/vector_search",
            "light/post_filter",
            "heavy/vector_search",
            "heavy/post_filter",
            "heavy+rare_kind/vector_search",
            "light/vector_search[custom_plan]",
            "heavy/vector_search[custom_plan]",
            "heavy+rare_kind/vector_search[custom_plan]",
        )
    }
    rare = KINDS.index(RARE_KIND)
    n_heavy = p.queries // 4 if len(heavy) else 0
    plan = (
        [("light", int(u)) for u in rng.choice(light, p.queries - n_heavy)]
        + [("heavy", int(u)) for u in rng.choice(heavy, n_heavy)]
        if len(heavy)
        else [("light", int(u)) for u in rng.choice(light, p.queries)]
    )
    rng.shuffle(plan)  # type: ignore[arg-type,unused-ignore]
    async with engine.connect() as pf:
        await pf.execute(text("SET hnsw.iterative_scan = off"))
        await pf.execute(text(f"SET hnsw.ef_search = {POST_FILTER_EF_SEARCH}"))
        # pgvector 0.8 may price the filtered HNSW scan above a scan of the table and
        # sort; a store that filters after ANN always scans the index, so force it.
        await pf.execute(text("SET enable_seqscan = off"))
        await pf.execute(text("SET enable_bitmapscan = off"))
        await pf.commit()
        # Warm-up: a pass over the hot structures, not counted.
        for _, u in plan[: min(50, len(plan))]:
            q = query_vector(c, u, rng)
            await production(engine, clock, pk_of[u], q, p.k)
            await production(custom, custom_clock, pk_of[u], q, p.k)
            await post_filter(pf, pk_of[u], q, p.k)
        began = time.perf_counter()
        for group, u in plan:
            q = query_vector(c, u, rng)
            truth = exact_top(c, u, q, p.k)
            for eng, clk, tag in ((engine, clock, ""), (custom, custom_clock, "[custom_plan]")):
                ms, got, parts = await production(eng, clk, pk_of[u], q, p.k)
                series[f"{group}/vector_search{tag}"].record(ms, got, truth, parts)
            ms, got = await post_filter(pf, pk_of[u], q, p.k)
            series[f"{group}/post_filter"].add(ms, got, truth)
            if group == "heavy":
                truth = exact_top(c, u, q, p.k, kind=rare)
                for eng, clk, tag in ((engine, clock, ""), (custom, custom_clock, "[custom_plan]")):
                    ms, got, parts = await production(eng, clk, pk_of[u], q, p.k, RARE_KIND)
                    series[f"heavy+rare_kind/vector_search{tag}"].record(ms, got, truth, parts)
        search_s = time.perf_counter() - began
        plans = await sample_plans(engine, pf, p, c, pk_of, rng)
    sweep = await hnsw_sweep(custom, p, c, pk_of, rng) if len(heavy) else []
    curve = await scan_curve(url, engine, clock, p, c, pk_of, rng)  # last: it moves users
    await engine.dispose()
    await custom.dispose()
    return {
        "search_wall_s": round(search_s, 1),
        "series": {name: s.summary() for name, s in series.items() if s.latency_ms},
        "plans": plans,
        "scan_curve": curve,
        "hnsw_sweep": sweep,
    }


def _pick_users(c: Corpus, sizes: Sequence[int]) -> list[int]:
    """For each wanted size, the user whose count is closest (distinct users)."""
    chosen: list[int] = []
    for want in sizes:
        order = np.argsort(np.abs(c.sizes - want))
        u = next(int(x) for x in order if int(x) not in chosen)
        if abs(int(c.sizes[u]) - want) <= max(2, want // 4):
            chosen.append(u)
    return chosen


async def hnsw_settings(
    conn: AsyncConnection, k: int, mode: str = "relaxed_order", ef: int = repo.HNSW_EF_SEARCH
) -> None:
    """The settings vector_search applies before its HNSW query (by default its values)."""
    await conn.execute(text(f"SET LOCAL hnsw.iterative_scan = {mode}"))
    await conn.execute(text(f"SET LOCAL hnsw.ef_search = {max(ef, k)}"))
    await conn.execute(text(f"SET LOCAL hnsw.max_scan_tuples = {repo.HNSW_MAX_SCAN_TUPLES}"))


async def sample_plans(
    engine: AsyncEngine,
    pf: AsyncConnection,
    p: Params,
    c: Corpus,
    pk_of: dict[int, int],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """What the planner does for each query shape, on one typical and one heavy user."""
    out: dict[str, Any] = {}
    light_u = _pick_users(c, [int(np.median(c.sizes))])[0]
    heavy_u = int(np.argmax(c.sizes))
    for label, u in (("median_user", light_u), ("largest_user", heavy_u)):
        q = query_vector(c, u, rng)
        params = {
            "user_pk": pk_of[u],
            "q": q.tolist(),
            "model": MODEL,
            "k": p.k,
            "kind": None,
        }
        async with engine.connect() as conn:
            await hnsw_settings(conn, p.k)
            out[label] = {
                "memories": int(c.sizes[u]),
                "vector_exact": await explain(conn, repo.VECTOR_EXACT, params),
                "vector_hnsw": await explain(conn, repo.VECTOR_HNSW, params),
            }
            await conn.rollback()
        out[label]["post_filter"] = await explain_text(pf, POST_FILTER, params)
    return out


CURVE_SIZES = (10, 100, 300, 1000, 2000, 3500, 5000, 6500, 10_000, 20_000, 50_000)
CURVE_REPS = 30


async def scan_curve(
    url: str,
    engine: AsyncEngine,
    clock: StatementClock,
    p: Params,
    c: Corpus,
    pk_of: dict[int, int],
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """The evidence for EXACT_SCAN_MAX: ``vector_search`` on users of growing size, each
    searched both ways, query by query in alternating order: as an ordinary user (the
    exact path: EXACT_SCAN_MAX set above every user) and as a heavy one (the HNSW path:
    EXACT_SCAN_MAX 0). The index holds only heavy users' rows, so the ordinary users of
    the curve are put in it first, as a move at a lower limit would (``ann``); run after
    every other series, which never see them there."""
    users = _pick_users(c, [w for w in CURVE_SIZES if w <= c.sizes.max()])
    db = await raw_connect(url)
    try:
        await db.execute(
            "UPDATE memories SET ann = true WHERE user_id = ANY($1::bigint[]) AND NOT ann",
            [pk_of[u] for u in users],
        )
        await db.execute("VACUUM ANALYZE memories")
    finally:
        await db.close()
    limit = repo.EXACT_SCAN_MAX
    rows: list[dict[str, Any]] = []
    for u in sorted(users, key=lambda x: int(c.sizes[x])):
        ms: dict[str, list[float]] = {"exact": [], "index": []}
        recall: dict[str, list[float]] = {"exact": [], "index": []}
        index_won = 0
        for i in range(CURVE_REPS + 2):  # two warm-up rounds
            q = query_vector(c, u, rng)
            truth = exact_top(c, u, q, p.k)
            took: dict[str, float] = {}
            for path in ("exact", "index") if i % 2 else ("index", "exact"):
                repo.EXACT_SCAN_MAX = 10**9 if path == "exact" else 0
                try:
                    took[path], got, _ = await production(engine, clock, pk_of[u], q, p.k)
                finally:
                    repo.EXACT_SCAN_MAX = limit
                if i >= 2:
                    ms[path].append(took[path])
                    recall[path].append(len(set(got) & set(truth)) / len(truth))
            index_won += i >= 2 and took["index"] < took["exact"]
        exact_p50, index_p50 = pct(ms["exact"], 50), pct(ms["index"], 50)
        rows.append(
            {
                "memories": int(c.sizes[u]),
                "exact_path_p50_ms": exact_p50,
                "exact_path_p99_ms": pct(ms["exact"], 99),
                "exact_path_recall": round(float(np.mean(recall["exact"])), 4),
                "index_path_p50_ms": index_p50,
                "index_path_p99_ms": pct(ms["index"], 99),
                "index_path_recall": round(float(np.mean(recall["index"])), 4),
                "index_over_exact_p50": round(index_p50 / exact_p50, 3),
                "queries": CURVE_REPS,
                "index_faster": index_won,
            }
        )
    return rows


SWEEP = (
    ("relaxed_order", 40),
    ("relaxed_order", 100),
    ("relaxed_order", 200),
    ("relaxed_order", 400),
    ("strict_order", 100),
    ("strict_order", 200),
)


async def hnsw_sweep(
    engine: AsyncEngine, p: Params, c: Corpus, pk_of: dict[int, int], rng: np.random.Generator
) -> list[dict[str, Any]]:
    """The HNSW query alone on heavy users under other iterative-scan settings."""
    heavy = [int(u) for u in np.flatnonzero(c.sizes > p.exact_scan_max)]
    queries = [(u, query_vector(c, u, rng)) for u in rng.choice(heavy, 60)]
    rows: list[dict[str, Any]] = []
    for mode, ef in SWEEP:
        ms: list[float] = []
        recall: list[float] = []
        async with engine.connect() as conn:
            await hnsw_settings(conn, p.k, mode, ef)
            for i, (u, q) in enumerate(queries):
                params = {
                    "user_pk": pk_of[u],
                    "q": q.tolist(),
                    "model": MODEL,
                    "k": p.k,
                    "kind": None,
                }
                began = time.perf_counter()
                got = await driver_fetch(conn, repo.VECTOR_HNSW, params)
                if i >= 5:
                    ms.append((time.perf_counter() - began) * 1000)
                    truth = exact_top(c, u, q, p.k)
                    recall.append(len({r["id"] - 1 for r in got} & set(truth)) / len(truth))
            await conn.rollback()
        rows.append(
            {
                "iterative_scan": mode,
                "ef_search": ef,
                "p50_ms": pct(ms, 50),
                "p99_ms": pct(ms, 99),
                "recall_at_k": round(float(np.mean(recall)), 4),
                "recall_min": round(float(np.min(recall)), 4),
            }
        )
    return rows


# --- report -----------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'series':44} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'recall@k':>9} "
        f"{'full k':>7} {'results':>12}"
    ]
    for name, s in result["series"].items():
        lines.append(
            f"{name:44} {s['searches']:>5} {s['p50_ms']:>8.2f} {s['p99_ms']:>8.2f} "
            f"{s['recall_at_k'] if s['recall_at_k'] is not None else float('nan'):>9.3f} "
            f"{s['full_results_share']:>7.1%} "
            f"{s['mean_results']:>5.2f}/{s['mean_expected']:<6.2f}"
        )
    lines.append("")
    lines.append(
        f"{'user memories':>14} {'exact p50':>10} {'index p50':>10} {'index/exact':>12} "
        f"{'index faster':>13} {'exact recall':>13} {'index recall':>13}"
    )
    for r in result["scan_curve"]:
        lines.append(
            f"{r['memories']:>14} {r['exact_path_p50_ms']:>10.2f} {r['index_path_p50_ms']:>10.2f} "
            f"{r['index_over_exact_p50']:>12.2f} {r['index_faster']:>6}/{r['queries']:<6} "
            f"{r['exact_path_recall']:>13.3f} {r['index_path_recall']:>13.3f}"
        )
    if result["hnsw_sweep"]:
        lines.append("")
        lines.append(f"{'heavy users, HNSW SQL':24} {'p50 ms':>8} {'p99 ms':>8} {'recall@k':>9}")
        for r in result["hnsw_sweep"]:
            label = f"{r['iterative_scan']} ef={r['ef_search']}"
            lines.append(
                f"{label:24} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['recall_at_k']:>9.3f}"
            )
    return "\n".join(lines)


def one_line(result: dict[str, Any]) -> str:
    d = result["dataset"]
    s = result["series"]
    light, heavy = s["light/vector_search"], s.get("heavy/vector_search")
    pf = s["light/post_filter"]
    text_ = (
        f"{d['rows']:,} memories × {result['params']['dim']}-d, {d['users']:,} users: "
        f"vector_search p99 {light['p99_ms']:.1f} ms light"
    )
    if heavy:
        text_ += f" / {heavy['p99_ms']:.1f} ms heavy, recall {heavy['recall_at_k']:.3f} heavy"
    text_ += (
        f", full k {min(x['full_results_share'] for k, x in s.items() if 'vector' in k):.1%}; "
        f"HNSW-then-filter returns {pf['mean_results']:.1f}/{pf['mean_expected']:.1f} results, "
        f"recall {pf['recall_at_k']:.3f}; HNSW build {d['hnsw_build_s']:.0f} s, "
        f"table {d['size_mib']['total']:.0f} MiB"
    )
    return text_


async def run(p: Params) -> dict[str, Any]:
    rng = np.random.default_rng(p.seed)
    began = time.perf_counter()
    corpus = generate(p, rng)
    gen_s = time.perf_counter() - began
    print(f"generated {len(corpus.owner):,} vectors in {gen_s:.1f} s", file=sys.stderr)
    load_avg_start = os.getloadavg()[0]
    with throwaway_embedded("mnemo-bench-memory-") as url:
        engine = create_async_engine(url)
        await upgrade_to_head(engine)
        await engine.dispose()
        dataset = await load(url, p, corpus)
        pk_of = dataset.pop("user_pk")
        print(
            f"loaded in {dataset['copy_s']} s, HNSW built in {dataset['hnsw_build_s']} s",
            file=sys.stderr,
        )
        figures = await measure(url, p, corpus, pk_of)
    sizes = corpus.sizes
    dataset.update(
        {
            "generate_s": round(gen_s, 1),
            "heavy_users": int((sizes > p.exact_scan_max).sum()),
            "heavy_user_sizes": sorted(int(x) for x in sizes[sizes > p.exact_scan_max]),
            "users_below_k": int((sizes < p.k).sum()),
            "user_size_p50": int(np.median(sizes)),
            "user_size_p99": int(np.percentile(sizes, 99)),
            "light_user_max": int(sizes[sizes <= p.exact_scan_max].max()),
            "topics": p.topics or max(64, p.users // 4),
        }
    )
    info = machine()
    info["loadavg_1m_at_start"] = round(load_avg_start, 2)
    return {
        "benchmark": "memory",
        "params": asdict(p),
        "production_settings": {
            "EXACT_SCAN_MAX": repo.EXACT_SCAN_MAX,
            "HNSW_EF_SEARCH": repo.HNSW_EF_SEARCH,
            "HNSW_MAX_SCAN_TUPLES": repo.HNSW_MAX_SCAN_TUPLES,
            "iterative_scan": "relaxed_order",
        },
        "targets": TARGETS,
        "machine": info,
        "dataset": dataset,
        **figures,
    }


def parse(argv: Sequence[str] | None = None) -> tuple[Params, Path]:
    ap = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--users", type=int, default=500)
    ap.add_argument("--per-user", type=int, default=100, help="mean memories per user")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--heavy", type=int, default=None, help="users above EXACT_SCAN_MAX")
    ap.add_argument("--topics", type=int, default=0, help="topic centres (0: users / 4)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--storage", choices=("default", "plain"), default="default")
    ap.add_argument("--maintenance-work-mem", default="4GB")
    ap.add_argument("--scale", action="store_true", help="1M memories, 10k users")
    a = ap.parse_args(argv)
    if a.scale:
        a.users, a.per_user = 10_000, 100
    a.dim = EMBEDDING_DIM
    a.heavy = a.heavy if a.heavy is not None else max(3, a.users // 1000)
    given = {f.name for f in fields(Params)} & vars(a).keys()
    return Params(**{name: getattr(a, name) for name in given}), a.out


def main(argv: Sequence[str] | None = None) -> int:
    p, out = parse(argv)
    result = asyncio.run(run(p))
    print(table(result))
    print(one_line(result))
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

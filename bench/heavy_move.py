"""A heavy user's first move into the HNSW index: how long it holds rows, what a write waits.

    python -m bench.heavy_move --out move.json [--rows 6000 --indexed 0 --batch B --seed S]

Starts a fresh embedded Postgres, loads one user's ``--rows`` memories (512-d random unit
vectors, written while the user was ordinary: outside the index) and, optionally,
``--indexed`` rows of another user already in the index, then moves the user the way
the worker does (``memory_jobs.move_heavy``: batches of ``repo.FLIP_BATCH`` rows, each
its own transaction; ``--batch 0``: every row in one transaction, the move before
batches). Beside it:

* a writer updates a random row of the user every 20 ms (``UPDATE ... SET pinned =
  pinned``, rolled back: the row lock a write takes) and times each update;
* a sampler reads ``pg_stat_activity`` every 10 ms: the age of the move's transaction
  (the longest is the longest any of its rows was held) and how long the writer has
  been waiting on a lock (``wait_event_type = 'Lock'``);
* the user's search (``vector_search``, k 10, a query near one of its rows) runs every
  50 ms, timed before the move (3 s), during it, and after it (3 s).

Reports the move's wall time and its backend's CPU, the longest transaction of the move,
the writer's waits (p50, p99, max, how many waited 100 ms or more), the longest lock
wait the sampler saw, and the search's latency in each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from sqlalchemy.ext.asyncio import create_async_engine

from app.services.memory_jobs import move_heavy
from app.stores import memories as repo
from app.stores.embedded import throwaway_embedded
from app.stores.engine import install_codecs
from app.stores.migrate import upgrade_to_head
from app.stores.tables import EMBEDDING_DIM
from bench.latency import machine
from bench.memory import CREATE_HNSW, pct, raw_connect

TENANT = "bench"
MOVER = "bench-move"
WRITER = "bench-writer"

SAMPLE = """
    SELECT application_name, now() - xact_start AS xact_age, wait_event_type,
           now() - query_start AS query_age
    FROM pg_stat_activity WHERE application_name IN ($1, $2) AND xact_start IS NOT NULL
"""


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


async def load(db: asyncpg.Connection, user: str, rows: int, ann: bool, seed: int) -> int:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((rows, EMBEDDING_DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    user_pk = int(
        await db.fetchval(
            "INSERT INTO users (tenant_id, external_id) VALUES ($1, $2) RETURNING id", TENANT, user
        )
    )
    await db.copy_records_to_table(
        "memories",
        records=[
            (TENANT, user_pk, "fact", f"{user} {i}", f"{user} {i}", vectors[i], "m", 512, ann)
            for i in range(rows)
        ],
        columns=[
            "tenant_id",
            "user_id",
            "kind",
            "text",
            "text_key",
            "embedding",
            "embedding_model",
            "embedding_dim",
            "ann",
        ],
    )
    return user_pk


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with throwaway_embedded("mnemo-bench-move-") as url:
        engine = create_async_engine(url, pool_size=1)
        await upgrade_to_head(engine)
        await engine.dispose()
        db = await raw_connect(url)
        if args.indexed:  # loaded before the index is built: a build, not graph inserts
            await db.execute("DROP INDEX memories_embedding_hnsw_idx")
            await db.execute("SET maintenance_work_mem = '1GB'")
            await load(db, "indexed", args.indexed, True, args.seed + 1)
            await db.execute(CREATE_HNSW)
        user_pk = await load(db, "heavy", args.rows, False, args.seed)
        rows = await db.fetch("SELECT id, embedding FROM memories WHERE user_id = $1", user_pk)
        ids = [int(r["id"]) for r in rows]
        vectors = [r["embedding"].to_numpy().astype(np.float32) for r in rows]
        await db.execute("VACUUM ANALYZE memories")

        mover = create_async_engine(
            url, pool_size=1, connect_args={"server_settings": {"application_name": MOVER}}
        )
        install_codecs(mover)
        async with mover.connect() as conn:
            pid = int((await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one())
        done = asyncio.Event()
        waits: list[float] = []
        samples: dict[str, float] = {"xact_s": 0.0, "lock_wait_s": 0.0}

        async def sample() -> None:
            while not done.is_set():
                for r in await db.fetch(SAMPLE, MOVER, WRITER):
                    if r["application_name"] == MOVER:
                        samples["xact_s"] = max(samples["xact_s"], r["xact_age"].total_seconds())
                    elif r["wait_event_type"] == "Lock":
                        samples["lock_wait_s"] = max(
                            samples["lock_wait_s"], r["query_age"].total_seconds()
                        )
                await asyncio.sleep(0.01)

        async def writes() -> None:
            while not done.is_set():
                await writer_once()
                await asyncio.sleep(0.02)

        wdb = await raw_connect(url)
        await wdb.execute(f"SET application_name = '{WRITER}'")
        rng = random.Random(args.seed)

        async def writer_once() -> None:
            tx = wdb.transaction()
            await tx.start()
            began = time.perf_counter()
            await wdb.execute("UPDATE memories SET pinned = pinned WHERE id = $1", rng.choice(ids))
            waits.append((time.perf_counter() - began) * 1000)
            await tx.rollback()

        searcher = create_async_engine(url, pool_size=1)
        install_codecs(searcher)
        phase = "before"
        search_ms: dict[str, list[float]] = {"before": [], "during": [], "after": []}

        async def searches() -> None:
            """The user's search every 50 ms: a query near one of its rows."""
            noise = np.random.default_rng(args.seed + 2)
            async with searcher.connect() as conn:
                while not done.is_set():
                    q = vectors[int(noise.integers(len(vectors)))] + noise.normal(
                        0, 0.5 / np.sqrt(EMBEDDING_DIM), EMBEDDING_DIM
                    ).astype(np.float32)
                    q /= np.linalg.norm(q)
                    began = time.perf_counter()
                    await repo.vector_search(
                        conn, user_pk=user_pk, query=q.tolist(), model="m", k=10
                    )
                    search_ms[phase].append((time.perf_counter() - began) * 1000)
                    await conn.rollback()
                    await asyncio.sleep(0.05)

        batch = args.batch if args.batch is not None else repo.FLIP_BATCH
        background = [
            asyncio.create_task(sample()),
            asyncio.create_task(writes()),
            asyncio.create_task(searches()),
        ]
        await asyncio.sleep(3)  # the writer's and the search's baseline
        phase = "during"
        c0, t0 = cpu_s(pid), time.perf_counter()
        if batch:
            repo.FLIP_BATCH = batch
            moved = await move_heavy(mover, tenant=TENANT, user_pks=[user_pk])
        else:  # every row in one transaction: the move before batches
            async with mover.begin() as conn:
                moved = await repo.flip_heavy(
                    conn, tenant=TENANT, user_pks=[user_pk], batch=args.rows + 1
                )
        move_s, move_cpu = time.perf_counter() - t0, cpu_s(pid) - c0
        phase = "after"
        await asyncio.sleep(3)
        done.set()
        await asyncio.gather(*background)
        await wdb.close()
        await db.close()
        await mover.dispose()
        await searcher.dispose()
    return {
        "benchmark": "heavy_move",
        "params": {"rows": args.rows, "indexed": args.indexed, "batch": batch, "seed": args.seed},
        "machine": {**machine(), "loadavg_1m_at_end": round(os.getloadavg()[0], 2)},
        "moved": moved,
        "move_s": round(move_s, 2),
        "move_backend_cpu_s": round(move_cpu, 2),
        "move_ms_a_row": round(1000 * move_s / max(moved, 1), 3),
        "longest_move_transaction_s": round(samples["xact_s"], 3),
        "writes": len(waits),
        "write_p50_ms": pct(waits, 50),
        "write_p99_ms": pct(waits, 99),
        "write_max_ms": round(max(waits), 1),
        "writes_waiting_100ms_or_more": sum(1 for w in waits if w >= 100),
        "longest_lock_wait_seen_s": round(samples["lock_wait_s"], 3),
        "search_ms": {
            name: {"n": len(ms), "p50": pct(ms, 50), "p99": pct(ms, 99), "max": round(max(ms), 1)}
            for name, ms in search_ms.items()
            if ms
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.heavy_move", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=6000)
    ap.add_argument("--indexed", type=int, default=0, help="another user's rows in the index")
    ap.add_argument("--batch", type=int, default=None, help="rows a batch (0: one transaction)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.rows <= repo.EXACT_SCAN_MAX:
        ap.error(f"--rows must exceed EXACT_SCAN_MAX ({repo.EXACT_SCAN_MAX}): no move otherwise")
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2), file=sys.stderr)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

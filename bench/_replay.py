"""Replay chat sessions written by others through the real HTTP API, and read them back.

Shared by the corpus benchmarks (``bench.agent_sessions``, ``bench.tau``): start
``mnemo serve`` on a throwaway embedded Postgres, post every message of a session
turn by turn as an agent would (waiting for the compression a post schedules),
``POST /compact?wait=true``, then read ``/context`` at the benchmark's budget. The
baseline is plain truncation of the same messages to the same budget (the newest
messages that fit, a tool call never split from its results), packed and printed
by the same code as the real context, so both are judged on equal terms.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.context.pack import RecentTurn, as_text, pack
from app.core.tokens import count_tokens
from bench._service import REPO_ROOT, running_service
from bench.recall.driver import wait_idle

WAIT_TIMEOUT_S = 120.0
KEEP = ("role", "content", "tool_calls", "tool_call_id", "name", "id")


def shared_data(*parts: str) -> Path:
    """A file under the project's shared data folder (``../shared/data`` of the main
    checkout; ``MNEMO_SHARED_DIR`` overrides), wherever this worktree lives."""
    env = os.environ.get("MNEMO_SHARED_DIR")
    roots = [Path(env)] if env else []
    roots += [p / "shared" for p in REPO_ROOT.parents]
    for root in roots:
        candidate = root.joinpath("data", *parts)
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"shared/data/{'/'.join(parts)} not found above {REPO_ROOT}")


@dataclass
class Replayed:
    """One session after replay: the context the service gave, and truncation's."""

    name: str
    context_text: str
    context_tokens: int
    state_tokens: int
    truncation_text: str
    truncation_tokens: int
    history_tokens: int
    compressions: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    truncation_messages: list[dict[str, Any]] = field(default_factory=list)


def truncation(messages: Sequence[dict[str, Any]], tokens: Sequence[int], budget: int) -> Any:
    recent = [
        RecentTurn(message={k: v for k, v in m.items() if k != "id"}, tokens=t)
        for m, t in zip(messages, tokens, strict=True)
    ]
    return pack(blocks=[], recent=recent, max_tokens=budget, count=count_tokens)


async def replay_one(
    client: httpx.AsyncClient,
    *,
    name: str,
    session_id: str,
    user_id: str,
    messages: Sequence[dict[str, Any]],
    budget: int,
) -> Replayed:
    tokens: list[int] = []
    for i, message in enumerate(messages):
        body = {k: message[k] for k in KEEP if message.get(k) is not None}
        r = await client.post(
            f"/v1/sessions/{session_id}/turns", json={"user_id": user_id, "messages": [body]}
        )
        if r.status_code != 201:
            raise RuntimeError(f"{name}: POST turn {i} → {r.status_code} {r.text[:300]}")
        ack = r.json()
        tokens.append(ack["turns"][0]["tokens"])
        if ack["compression_scheduled"]:
            await wait_idle(client, session_id, WAIT_TIMEOUT_S)
    await wait_idle(client, session_id, WAIT_TIMEOUT_S)
    r = await client.post(
        f"/v1/sessions/{session_id}/compact", params={"wait": "true", "timeout_s": 120}
    )
    if r.status_code >= 500:
        raise RuntimeError(f"{name}: compact → {r.status_code} {r.text[:300]}")
    ctx = (
        await client.get(f"/v1/sessions/{session_id}/context", params={"max_tokens": budget})
    ).json()
    events = (await client.get(f"/v1/sessions/{session_id}/events", params={"limit": 200})).json()
    blocks = {b["kind"]: b["tokens"] for b in ctx["blocks"]}
    trunc = truncation(messages, tokens, budget)
    return Replayed(
        name=name,
        context_text=ctx["text"],
        context_tokens=ctx["tokens"],
        state_tokens=blocks.get("task_state", 0),
        truncation_text=as_text(trunc.messages),
        truncation_tokens=trunc.tokens,
        history_tokens=ctx["full_history_tokens"],
        compressions=len(events["events"]),
        messages=ctx["messages"],
        truncation_messages=trunc.messages,
    )


@dataclass(frozen=True)
class Job:
    """One session to replay: its messages, already in the API's message shape."""

    name: str
    user_id: str
    messages: list[dict[str, Any]]


def replay_all(
    jobs: Sequence[Job],
    *,
    budget: int,
    env: Mapping[str, str],
    concurrency: int = 2,
    run_tag: str = "",
) -> list[Replayed]:
    """Start a fresh service, replay every job (``concurrency`` at a time), stop it."""
    tag = run_tag or str(int(time.time()))

    async def main(base_url: str) -> list[Replayed]:
        gate = asyncio.Semaphore(concurrency)

        async def one(job: Job) -> Replayed:
            async with gate, httpx.AsyncClient(base_url=base_url, timeout=180.0) as client:
                began = time.perf_counter()
                out = await replay_one(
                    client,
                    name=job.name,
                    session_id=f"{job.name}-{tag}",
                    user_id=f"{job.user_id}-{tag}",
                    messages=job.messages,
                    budget=budget,
                )
                print(
                    f"  {job.name}: {len(job.messages)} messages, {out.compressions} "
                    f"compressions, {time.perf_counter() - began:.1f} s",
                    file=sys.stderr,
                )
                return out

        return list(await asyncio.gather(*(one(j) for j in jobs)))

    with running_service(extra_env=dict(env)) as service:
        print(f"service ready in {service.start_s:.2f} s", file=sys.stderr)
        return asyncio.run(main(service.base_url))


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


Scorer = Callable[[Any, str], Mapping[str, Any]]

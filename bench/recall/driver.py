"""Driving the real service: post every session message by message as an agent would,
wait for the compression a post schedules, checkpoint the context every 10 turns,
and collect the final context, state and compression events.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench._service import Service
from bench.recall.baselines import truncated
from bench.sessions import Session

CHECKPOINT_EVERY = 10


WAIT_TIMEOUT_S = 120.0


LLM_WAIT_TIMEOUT_S = 600.0


POLL_S = 0.02


@dataclass
class Run:
    session: Session
    acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    waits: int = 0
    wait_s: float = 0.0
    post_s: float = 0.0


async def wait_idle(client: httpx.AsyncClient, session_id: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = await client.get(f"/v1/sessions/{session_id}")
        r.raise_for_status()
        if r.json()["pending_jobs"] == 0:
            return
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"{session_id}: compression still pending after {timeout_s:.0f} s")


async def drive(
    client: httpx.AsyncClient, session: Session, budget: int, wait_timeout_s: float
) -> Run:
    """Post the session message by message; checkpoint the context every 10 turns."""
    run = Run(session)
    sid = session.session_id
    tokens: list[int] = []
    for i, message in enumerate(session.messages):
        began = time.perf_counter()
        r = await client.post(
            f"/v1/sessions/{sid}/turns", json={"user_id": session.user_id, "messages": [message]}
        )
        run.post_s += time.perf_counter() - began
        if r.status_code != 201:
            raise RuntimeError(f"{sid}: POST turn {i} → {r.status_code} {r.text[:300]}")
        ack = r.json()
        run.acks[message["id"]] = ack["turns"][0]
        tokens.append(ack["turns"][0]["tokens"])
        if ack["compression_scheduled"]:
            began = time.perf_counter()
            await wait_idle(client, sid, wait_timeout_s)
            run.waits += 1
            run.wait_s += time.perf_counter() - began
        last = i == len(session.messages) - 1
        if (i + 1) % CHECKPOINT_EVERY == 0 or last:
            if last:
                await wait_idle(client, sid, wait_timeout_s)
            ctx = (
                await client.get(f"/v1/sessions/{sid}/context", params={"max_tokens": budget})
            ).json()
            blocks = {b["kind"]: b["tokens"] for b in ctx["blocks"]}
            trunc = truncated(session.messages[: i + 1], tokens, budget)
            run.checkpoints.append(
                {
                    "turn": i + 1,
                    "context_tokens": ctx["tokens"],
                    "state_tokens": blocks.get("task_state", 0),
                    "recent_tokens": blocks.get("recent", 0),
                    "full_history_tokens": ctx["full_history_tokens"],
                    "truncation_tokens": trunc.tokens,
                    "recent_messages": sum(m["role"] != "system" for m in ctx["messages"]),
                    "truncation_messages": len(trunc.messages),
                    "state_version": ctx["state_version"],
                }
            )
            if last:
                run.final = ctx
    run.state = (await client.get(f"/v1/sessions/{sid}/state")).json().get("state") or {}
    listed = (await client.get(f"/v1/sessions/{sid}/events", params={"limit": 200})).json()
    for summary in sorted(listed["events"], key=lambda e: e["id"]):
        detail = (await client.get(f"/v1/sessions/{sid}/events/{summary['id']}")).json()
        run.events.append(detail)
    return run


async def drive_all(
    service: Service, sessions: Sequence[Session], args: argparse.Namespace
) -> list[Run]:
    wait_timeout = LLM_WAIT_TIMEOUT_S if args.llm_base_url else WAIT_TIMEOUT_S
    gate = asyncio.Semaphore(args.concurrency)

    async def one(session: Session) -> Run:
        async with gate, httpx.AsyncClient(base_url=service.base_url, timeout=60.0) as client:
            began = time.perf_counter()
            run = await drive(client, session, args.budget, wait_timeout)
            print(
                f"  {session.session_id}: {len(session.messages)} turns, "
                f"{len(run.events)} compressions, {time.perf_counter() - began:.1f} s",
                file=sys.stderr,
            )
            return run

    return list(await asyncio.gather(*(one(s) for s in sessions)))

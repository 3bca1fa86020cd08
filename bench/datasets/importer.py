"""Feed a ``Dataset`` to Mnemo through its public HTTP API, resumably.

Each session is posted in order, in batches, every message with a client id
(its dataset id), its original time (``created_at``) and its dataset id in
``metadata.dataset_id``; the speaker, when known, in ``name`` and
``metadata.speaker``. Nothing else from the dataset is sent: no evidence flag,
no original session id.

Resuming: a JSON progress file lists the sessions fully posted. On a rerun,
those are checked with ``GET /v1/sessions/{id}`` (the store may be a new one)
and skipped when complete; any other session is posted again from its first
message, which is safe because re-posting a client id is a no-op.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.datasets.model import Dataset, Session, Turn, User, api_id
from bench.datasets.progress import Progress

MAX_BATCH_MESSAGES = 100
MAX_BATCH_CHARS = 1_000_000
# OpenAI's rule for a message's ``name``; other names go to metadata only.
_OPENAI_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PROBE_TEXT = "Benchmark probe: answer the next question from long-term memory."


class ImportError_(RuntimeError):
    """The service refused a post (the message says which session and why)."""


@dataclass
class ImportState:
    """The progress file: which sessions are fully posted, for which dataset."""

    path: Path
    fingerprint: str
    done: set[str] = field(default_factory=set)

    @classmethod
    def open(cls, path: Path, fingerprint: str) -> ImportState:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls(path, fingerprint)
        if raw.get("fingerprint") != fingerprint:
            return cls(path, fingerprint)  # another dataset or options: start over
        return cls(path, fingerprint, set(raw.get("done", [])))

    def mark(self, session_id: str) -> None:
        self.done.add(session_id)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        body = {"fingerprint": self.fingerprint, "done": sorted(self.done)}
        tmp.write_text(json.dumps(body), encoding="utf-8")
        os.replace(tmp, self.path)


def message(turn: Turn) -> dict[str, Any]:
    metadata: dict[str, Any] = {"dataset_id": turn.dataset_id}
    out: dict[str, Any] = {
        "role": turn.role,
        "content": turn.content,
        "id": turn.dataset_id,
        "created_at": turn.created_at,
        "metadata": metadata,
    }
    if turn.name:
        metadata["speaker"] = turn.name
        if _OPENAI_NAME.match(turn.name):
            out["name"] = turn.name
    return out


def batches(turns: Sequence[Turn]) -> list[list[Turn]]:
    out: list[list[Turn]] = []
    current: list[Turn] = []
    chars = 0
    for turn in turns:
        if current and (
            len(current) >= MAX_BATCH_MESSAGES or chars + len(turn.content) > MAX_BATCH_CHARS
        ):
            out.append(current)
            current, chars = [], 0
        current.append(turn)
        chars += len(turn.content)
    if current:
        out.append(current)
    return out


async def _complete(client: httpx.AsyncClient, session: Session) -> bool:
    r = await client.get(f"/v1/sessions/{session.session_id}")
    return r.status_code == 200 and r.json()["turn_count"] >= len(session.turns)


async def post_session(client: httpx.AsyncClient, user: User, session: Session) -> None:
    for batch in batches(session.turns):
        body = {"user_id": user.user_id, "messages": [message(t) for t in batch]}
        r = await client.post(f"/v1/sessions/{session.session_id}/turns", json=body)
        if r.status_code != 201:
            raise ImportError_(f"{session.session_id}: {r.status_code} {r.text[:300]}")


def probe_session_id(user_id: str) -> str:
    return api_id(user_id, "probe")


async def post_probe(client: httpx.AsyncClient, user_id: str) -> str:
    """A session of ``user_id`` holding one system message, for /context probes.

    A system message creates the session without queuing an index job, so the
    probe adds no episode and its recent turns carry no dataset text.
    """
    sid = probe_session_id(user_id)
    body = {
        "user_id": user_id,
        "messages": [{"role": "system", "content": PROBE_TEXT, "id": "probe"}],
    }
    r = await client.post(f"/v1/sessions/{sid}/turns", json=body)
    if r.status_code != 201:
        raise ImportError_(f"{sid}: {r.status_code} {r.text[:300]}")
    return sid


async def import_dataset(
    client: httpx.AsyncClient,
    dataset: Dataset,
    state: ImportState,
    *,
    concurrency: int = 4,
) -> dict[str, Any]:
    """Post every session (users in parallel, a user's sessions in order); returns counts."""
    progress = Progress(dataset.session_count, "sessions")
    skipped = posted = 0
    gate = asyncio.Semaphore(concurrency)
    began = time.perf_counter()

    async def one_user(user: User) -> None:
        nonlocal skipped, posted
        async with gate:
            for session in user.sessions:
                if session.session_id in state.done and await _complete(client, session):
                    skipped += 1
                else:
                    await post_session(client, user, session)
                    state.mark(session.session_id)
                    posted += 1
                progress.advance()
            await post_probe(client, user.user_id)

    try:
        await asyncio.gather(*(one_user(u) for u in dataset.users))
    finally:
        progress.close()
    return {
        "sessions_posted": posted,
        "sessions_skipped": skipped,
        "seconds": round(time.perf_counter() - began, 2),
    }


_GAUGE = re.compile(r'^mnemo_job_queue_depth\{status="(\w+)"\}\s+([0-9.e+]+)', re.MULTILINE)


async def queue_depth(client: httpx.AsyncClient) -> dict[str, int]:
    text = (await client.get("/metrics")).text
    return {m.group(1): int(float(m.group(2))) for m in _GAUGE.finditer(text)}


async def wait_for_jobs(
    client: httpx.AsyncClient, *, timeout_s: float = 3600.0, poll_s: float = 0.5
) -> dict[str, Any]:
    """Block until no job is queued or running; returns the seconds waited and dead jobs."""
    began = time.perf_counter()
    first: int | None = None
    progress: Progress | None = None
    while True:
        depth = await queue_depth(client)
        waiting = depth.get("queued", 0) + depth.get("running", 0)
        if first is None:
            first = waiting
            progress = Progress(waiting, "jobs") if waiting else None
        if progress is not None:
            progress.advance(max(0, (first - waiting) - progress.done))
        if waiting == 0:
            break
        if time.perf_counter() - began > timeout_s:
            raise TimeoutError(f"{waiting} jobs still pending after {timeout_s:.0f} s")
        await asyncio.sleep(poll_s)
    if progress is not None:
        progress.close()
    return {
        "seconds": round(time.perf_counter() - began, 2),
        "jobs_at_start": first,
        "dead_jobs": depth.get("dead", 0),
    }

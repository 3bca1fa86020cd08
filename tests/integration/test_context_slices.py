"""The first read of a session whose live user turns are not indexed yet reads them from
their text a slice at a time: the event loop serves other requests between two turns'
readings instead of waiting behind all of them, and the context is the same. Against
real Postgres, through the app."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from app.compression.live_notes import turn_units
from app.services import context as context_service
from app.services.ingest import UNITS_POST_CHARS
from tests.conftest import post_turns


def _bulk(nonce: str) -> list[dict[str, str]]:
    """A bulk post (ingest leaves its user turns to the worker): user turns that each
    state something, with a text no process has read before."""
    messages = []
    for i in range(16):
        messages += [
            {
                "id": f"u{i}",
                "role": "user",
                "content": f"Never restart replica {i} of cluster {nonce} before the backup"
                " has finished and the on-call engineer has confirmed it in writing.",
            },
            {"id": f"a{i}", "role": "assistant", "content": "Understood, noted." * 20},
        ]
    assert sum(len(m["content"]) for m in messages if m["role"] == "user") > UNITS_POST_CHARS
    return messages


async def _read_beside_a_ticker(client: httpx.AsyncClient) -> tuple[bytes, list[int]]:
    """The context of session s, and the extractor's miss count each time another
    coroutine ran while it was read."""
    seen: list[int] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            seen.append(turn_units.cache_info().misses)
            await asyncio.sleep(0)

    async def read() -> bytes:
        try:
            response = await client.get("/v1/sessions/s/context", params={"max_tokens": 600})
            response.raise_for_status()
            return response.content
        finally:
            done.set()

    body, _ = await asyncio.gather(read(), ticker())
    return body, seen


async def test_unindexed_turns_are_read_a_slice_at_a_time(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await post_turns(client, "s", _bulk(uuid.uuid4().hex))).status_code == 201
    # A slice of no time: a pause after each turn read.
    monkeypatch.setattr(context_service, "READ_SLICE_S", 0.0)
    before = turn_units.cache_info().misses
    sliced, seen = await _read_beside_a_ticker(client)
    read = turn_units.cache_info().misses - before
    assert read >= 16  # every user turn was read from its text, here
    # Another coroutine ran between two readings (in one go, it saw none of them done
    # or all of them).
    assert any(before < m < before + read for m in seen)
    # The same context as a read of the same turns in one go.
    turn_units.cache_clear()
    monkeypatch.setattr(context_service, "READ_SLICE_S", 3600.0)
    whole, seen = await _read_beside_a_ticker(client)
    assert not any(0 < m < read for m in seen)
    assert whole == sliced

"""``Client`` (sync) and ``AsyncClient``: thin shells that send what ``_core`` builds.

Each method is one line; paths, ids, retries and errors live once, in ``_core``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import httpx

from mnemo_client import _core
from mnemo_client._core import Call
from mnemo_client.types import (
    Compaction,
    Context,
    Events,
    Memories,
    Memory,
    Message,
    PoppedTurn,
    Session,
    State,
    TurnsOut,
    TurnsPage,
)

DEFAULT_TIMEOUT_S = 30.0


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Client:
    """Mnemo over HTTP, blocking. ``Client(base_url, api_key)``; use as a context manager."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 3,
        http: httpx.Client | None = None,
    ) -> None:
        self.max_retries = max_retries
        self._http = http or httpx.Client(
            base_url=base_url, headers=_headers(api_key), timeout=timeout
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: Call) -> Any:
        for attempt in itertools.count(1):
            try:
                response = self._http.send(call.request(self._http))
            except httpx.TransportError:
                delay = _core.retry_delay(
                    attempt, self.max_retries, None, idempotent=call.idempotent
                )
                if delay is None:
                    raise
            else:
                delay = _core.retry_delay(attempt, self.max_retries, response)
                if delay is None:
                    return _core.result(response)
            time.sleep(delay)

    def post_turns(self, session_id: str, user_id: str, messages: Sequence[Message]) -> TurnsOut:
        return cast(TurnsOut, self._run(_core.post_turns(session_id, user_id, messages)))

    def get_context(
        self, session_id: str, *, max_tokens: int | None = None, query: str | None = None
    ) -> Context:
        return cast(Context, self._run(_core.get_context(session_id, max_tokens, query)))

    def get_session(self, session_id: str) -> Session:
        return cast(Session, self._run(_core.get_session(session_id)))

    def get_state(self, session_id: str) -> State:
        return cast(State, self._run(_core.get_state(session_id)))

    def list_turns(self, session_id: str, *, after_seq: int = 0, limit: int = 100) -> TurnsPage:
        return cast(TurnsPage, self._run(_core.list_turns(session_id, after_seq, limit)))

    def delete_session(self, session_id: str) -> None:
        self._run(_core.delete_session(session_id))

    def pop_turn(self, session_id: str) -> PoppedTurn:
        """Remove the session's newest turn and return it (not resent on a lost answer)."""
        return cast(PoppedTurn, self._run(_core.pop_turn(session_id)))

    def compact(
        self, session_id: str, *, wait: bool = False, timeout_s: float | None = None
    ) -> Compaction:
        return cast(Compaction, self._run(_core.compact(session_id, wait, timeout_s)))

    def list_events(self, session_id: str, *, limit: int = 50, before: int | None = None) -> Events:
        return cast(Events, self._run(_core.list_events(session_id, limit, before)))

    def create_memory(
        self,
        user_id: str,
        text: str,
        *,
        kind: str = "fact",
        pinned: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> Memory:
        call = _core.create_memory(user_id, text, kind, pinned, metadata)
        return cast(Memory, self._run(call))

    def list_memories(
        self, user_id: str, *, query: str | None = None, limit: int = 20, kind: str | None = None
    ) -> Memories:
        return cast(Memories, self._run(_core.list_memories(user_id, query, limit, kind)))

    def delete_memory(self, user_id: str, memory_id: int) -> None:
        self._run(_core.delete_memory(user_id, memory_id))

    def erase_user(self, user_id: str) -> None:
        self._run(_core.erase_user(user_id))


class AsyncClient:
    """Mnemo over HTTP, for asyncio. Same methods as ``Client``, awaited."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 3,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.max_retries = max_retries
        self._http = http or httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, call: Call) -> Any:
        for attempt in itertools.count(1):
            try:
                response = await self._http.send(call.request(self._http))
            except httpx.TransportError:
                delay = _core.retry_delay(
                    attempt, self.max_retries, None, idempotent=call.idempotent
                )
                if delay is None:
                    raise
            else:
                delay = _core.retry_delay(attempt, self.max_retries, response)
                if delay is None:
                    return _core.result(response)
            await asyncio.sleep(delay)

    async def post_turns(
        self, session_id: str, user_id: str, messages: Sequence[Message]
    ) -> TurnsOut:
        return cast(TurnsOut, await self._run(_core.post_turns(session_id, user_id, messages)))

    async def get_context(
        self, session_id: str, *, max_tokens: int | None = None, query: str | None = None
    ) -> Context:
        return cast(Context, await self._run(_core.get_context(session_id, max_tokens, query)))

    async def get_session(self, session_id: str) -> Session:
        return cast(Session, await self._run(_core.get_session(session_id)))

    async def get_state(self, session_id: str) -> State:
        return cast(State, await self._run(_core.get_state(session_id)))

    async def list_turns(
        self, session_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> TurnsPage:
        return cast(TurnsPage, await self._run(_core.list_turns(session_id, after_seq, limit)))

    async def delete_session(self, session_id: str) -> None:
        await self._run(_core.delete_session(session_id))

    async def pop_turn(self, session_id: str) -> PoppedTurn:
        return cast(PoppedTurn, await self._run(_core.pop_turn(session_id)))

    async def compact(
        self, session_id: str, *, wait: bool = False, timeout_s: float | None = None
    ) -> Compaction:
        return cast(Compaction, await self._run(_core.compact(session_id, wait, timeout_s)))

    async def list_events(
        self, session_id: str, *, limit: int = 50, before: int | None = None
    ) -> Events:
        return cast(Events, await self._run(_core.list_events(session_id, limit, before)))

    async def create_memory(
        self,
        user_id: str,
        text: str,
        *,
        kind: str = "fact",
        pinned: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> Memory:
        call = _core.create_memory(user_id, text, kind, pinned, metadata)
        return cast(Memory, await self._run(call))

    async def list_memories(
        self, user_id: str, *, query: str | None = None, limit: int = 20, kind: str | None = None
    ) -> Memories:
        return cast(Memories, await self._run(_core.list_memories(user_id, query, limit, kind)))

    async def delete_memory(self, user_id: str, memory_id: int) -> None:
        await self._run(_core.delete_memory(user_id, memory_id))

    async def erase_user(self, user_id: str) -> None:
        await self._run(_core.erase_user(user_id))

"""What the sync and async clients share: the calls, retry decisions, ids, errors.

Pure: no I/O. ``Client`` and ``AsyncClient`` only send what these functions build.
"""

from __future__ import annotations

import email.utils
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from mnemo_client.types import Message

RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0


class MnemoError(Exception):
    """An error answer: ``problem`` is the RFC 9457 body (``errors`` names the fields)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.errors: list[dict[str, Any]] = list(problem.get("errors") or [])
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}")


@dataclass(frozen=True)
class Call:
    """One HTTP request: method, path, query, JSON body."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    # Safe to resend after a lost answer (a memory post would be confirmed twice, a pop
    # would pop twice).
    idempotent: bool = True

    def request(self, client: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        params = {k: v for k, v in self.params.items() if v is not None}
        return client.build_request(self.method, self.path, params=params, json=self.json)


def seg(value: str) -> str:
    return quote(value, safe="")


def with_ids(messages: Sequence[Message | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Give every message an ``id`` (kept when it has one): a retried post is a no-op."""
    return [dict(m) if m.get("id") else {**m, "id": f"c-{uuid.uuid4().hex}"} for m in messages]


def retry_delay(
    attempt: int,
    max_retries: int,
    response: httpx.Response | None,
    *,
    idempotent: bool = True,
    backoff_s: float = 0.5,
    now: float | None = None,
) -> float | None:
    """Seconds to wait before retry ``attempt`` (1-based), or None to give up.

    Retried: 429/502/503/504 (honouring ``Retry-After``, seconds or an HTTP date, capped;
    the server stored nothing) and, for idempotent calls, a failed connection
    (``response`` None). Posted turns carry message ids, so resending them is a no-op.
    """
    if attempt > max_retries or (response is None and not idempotent):
        return None
    if response is not None and response.status_code not in RETRY_STATUSES:
        return None
    fallback = backoff_s * 2.0 ** (attempt - 1)
    header = response.headers.get("retry-after") if response is not None else None
    if header is None:
        return min(fallback, MAX_RETRY_AFTER_S)
    if header.strip().isdigit():
        return min(float(header), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(header).timestamp()
    except (TypeError, ValueError):
        return min(fallback, MAX_RETRY_AFTER_S)
    return min(max(0.0, when - (time.time() if now is None else now)), MAX_RETRY_AFTER_S)


def result(response: httpx.Response) -> Any:
    """The JSON body of a success, None for 204; MnemoError for anything else."""
    if response.status_code == 204:
        return None
    if response.is_success:
        return response.json()
    try:
        problem = response.json()
    except ValueError:
        problem = {"title": response.reason_phrase, "detail": response.text[:500]}
    raise MnemoError(response.status_code, problem if isinstance(problem, dict) else {})


# The calls, one per operation of the API (operation ids in docs/openapi.json).


def post_turns(session_id: str, user_id: str, messages: Sequence[Message]) -> Call:
    body = {"user_id": user_id, "messages": with_ids(messages)}
    return Call("POST", f"/v1/sessions/{seg(session_id)}/turns", json=body)


def get_context(session_id: str, max_tokens: int | None, query: str | None) -> Call:
    params = {"max_tokens": max_tokens, "query": query}
    return Call("GET", f"/v1/sessions/{seg(session_id)}/context", params)


def get_session(session_id: str) -> Call:
    return Call("GET", f"/v1/sessions/{seg(session_id)}")


def get_state(session_id: str) -> Call:
    return Call("GET", f"/v1/sessions/{seg(session_id)}/state")


def list_turns(session_id: str, after_seq: int, limit: int) -> Call:
    params = {"after_seq": after_seq, "limit": limit}
    return Call("GET", f"/v1/sessions/{seg(session_id)}/turns", params)


def delete_session(session_id: str) -> Call:
    return Call("DELETE", f"/v1/sessions/{seg(session_id)}")


def pop_turn(session_id: str) -> Call:
    # Not resent after a lost answer: the resend would pop the turn before it.
    return Call("DELETE", f"/v1/sessions/{seg(session_id)}/turns/last", idempotent=False)


def compact(session_id: str, wait: bool, timeout_s: float | None) -> Call:
    params = {"wait": str(wait).lower(), "timeout_s": timeout_s}
    return Call("POST", f"/v1/sessions/{seg(session_id)}/compact", params)


def list_events(session_id: str, limit: int, before: int | None) -> Call:
    params = {"limit": limit, "before": before}
    return Call("GET", f"/v1/sessions/{seg(session_id)}/events", params)


def create_memory(
    user_id: str, text: str, kind: str, pinned: bool, metadata: Mapping[str, Any] | None
) -> Call:
    body = {"text": text, "kind": kind, "pinned": pinned, "metadata": dict(metadata or {})}
    return Call("POST", f"/v1/users/{seg(user_id)}/memories", json=body, idempotent=False)


def list_memories(user_id: str, query: str | None, limit: int, kind: str | None) -> Call:
    params = {"query": query, "limit": limit, "kind": kind}
    return Call("GET", f"/v1/users/{seg(user_id)}/memories", params)


def delete_memory(user_id: str, memory_id: int) -> Call:
    return Call("DELETE", f"/v1/users/{seg(user_id)}/memories/{int(memory_id)}")


def erase_user(user_id: str) -> Call:
    return Call("DELETE", f"/v1/users/{seg(user_id)}")

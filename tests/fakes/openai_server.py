"""A real OpenAI-compatible HTTP server with scripted replies, for LLM client tests.

It runs uvicorn on 127.0.0.1 (a free port) in a background thread and answers
``POST /v1/chat/completions`` from a queue of ``Reply`` objects: good JSON,
malformed JSON, schema-invalid JSON, slow replies, HTTP errors. Every request
body and its headers are recorded so tests can assert what the client sent.

    with serve_scripted_llm() as llm:
        llm.script(ok({"units": []}), http_error(500))
        client = ChatClient(http, base_url=llm.base_url, ...)

or use the ``scripted_llm`` fixture (import it into the test module).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``body`` (raw text) replaces the completion envelope."""

    content: str | None = None
    status: int = 200
    body: str | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def ok(content: str | dict[str, Any]) -> Reply:
    """A completion whose message content is ``content`` (a dict is JSON-encoded)."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return Reply(content=text)


def units(*items: dict[str, Any]) -> Reply:
    return ok({"units": list(items)})


def malformed() -> Reply:
    return Reply(content='{"units": [{"kind": "constraint", "text": "no shellf')


def slow(delay_s: float, content: str | dict[str, Any] = '{"units": []}') -> Reply:
    return Reply(content=ok(content).content, delay_s=delay_s)


def http_error(status: int, *, retry_after: float | None = None) -> Reply:
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    body = json.dumps({"error": {"message": f"scripted {status}", "type": "scripted"}})
    return Reply(status=status, body=body, headers=headers)


def raw(body: str, status: int = 200) -> Reply:
    return Reply(status=status, body=body)


_EXHAUSTED = Reply(status=400, body='{"error": {"message": "fake server: no scripted reply left"}}')


class ScriptedLLM:
    """The server's handle: script replies, read what was received."""

    def __init__(self) -> None:
        self.base_url = ""  # set once listening: http://127.0.0.1:<port>/v1
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self.exhausted = 0  # requests that found the script empty
        self.stopping = threading.Event()

    def reset(self) -> None:
        """Forget script and records, so one server can serve many tests."""
        with self._lock:
            self._replies.clear()
            self._requests.clear()
            self._headers.clear()
            self.exhausted = 0

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._headers)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def _take(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            if self._replies:
                return self._replies.popleft()
            self.exhausted += 1
            return _EXHAUSTED

    async def _wait(self, delay_s: float) -> None:
        # Wait on a thread-safe flag, so that stopping the server cuts slow replies short.
        await asyncio.to_thread(self.stopping.wait, delay_s)

    async def completions(self, request: Request) -> Response:
        raw_body = await request.body()
        try:
            body = json.loads(raw_body)
        except ValueError:
            body = {"_raw": raw_body.decode(errors="replace")}
        reply = self._take(body, dict(request.headers))
        if reply.delay_s:
            await self._wait(reply.delay_s)
        if reply.body is not None:
            return Response(
                reply.body,
                status_code=reply.status,
                headers=reply.headers,
                media_type="application/json",
            )
        envelope = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "?"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": "stop",
                }
            ],
            # Deterministic stand-ins for token counts: characters in and out.
            "usage": {
                "prompt_tokens": len(json.dumps(body.get("messages", []))),
                "completion_tokens": len(reply.content or ""),
            },
        }
        return JSONResponse(envelope, status_code=reply.status, headers=reply.headers)


@contextmanager
def serve_scripted_llm() -> Iterator[ScriptedLLM]:
    llm = ScriptedLLM()
    app = Starlette(routes=[Route("/v1/chat/completions", llm.completions, methods=["POST"])])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        loop="asyncio",
        http="h11",
        ws="none",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="scripted-llm", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("scripted LLM server did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        llm.base_url = f"http://127.0.0.1:{port}/v1"
        yield llm
    finally:
        llm.stopping.set()
        server.should_exit = True
        thread.join(timeout=10)
        if thread.is_alive():
            raise RuntimeError("scripted LLM server did not stop")


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLM]:
    """A running scripted server per test; ``.script(...)`` it, read ``.requests``."""
    with serve_scripted_llm() as llm:
        yield llm

"""Per-request id, latency histogram by route template, and an access log line."""

from __future__ import annotations

import logging
import re
import time
import uuid

from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api import problems
from app.api.collector import IdleCollector
from app.core.logs import request_id
from app.core.metrics import Metrics

log = logging.getLogger("mnemo.access")
SAFE_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")


def _incoming_id(scope: Scope) -> str:
    """The caller's ``X-Request-Id`` (the last one sent), or ""."""
    found = b""
    for name, value in scope.get("headers") or ():
        if name == b"x-request-id":
            found = value
    return found.decode("latin-1")


class ObservabilityMiddleware:
    def __init__(
        self, app: ASGIApp, *, metrics: Metrics, collector: IdleCollector | None = None
    ) -> None:
        self.app = app
        self.metrics = metrics
        # Told of each request's start and end: full collections wait for a quiet moment.
        self.collector = collector or IdleCollector()
        # The histogram's child of each (method, route, status) seen: ``labels`` looks
        # it up under a lock on every request. As many as the histogram holds anyway.
        self._latency: dict[tuple[str, str, int], Histogram] = {}

    def _observe(self, method: str, template: str, status: int, elapsed: float) -> None:
        key = (method, template, status)
        child = self._latency.get(key)
        if child is None:
            child = self._latency[key] = self.metrics.http_latency.labels(
                method, template, str(status)
            )
        child.observe(elapsed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = _incoming_id(scope)
        rid = incoming if SAFE_ID.match(incoming) else uuid.uuid4().hex
        token = request_id.set(rid)
        status = 500
        start = time.perf_counter()
        self.collector.started()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            self._observe(scope["method"], template, status, elapsed)
            log.info(
                "%s %s %s",
                scope["method"],
                template,
                status,
                extra={
                    "method": scope["method"],
                    "path": template,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                },
            )
            request_id.reset(token)
            self.collector.finished()


class ReplayLostReads:
    """A read (GET, HEAD) whose database connection was lost while it ran (its backend
    terminated by an operator or a failover, the server restarted under it) runs once
    more, on a fresh connection, before its client sees a 503. A read writes nothing,
    so a second run is safe. A write is never run again here: it may have committed
    before its connection went, so its client gets the 503 with Retry-After and
    decides (a message sent again with its id is stored once).

    The first run's response is held back only when it is that 503 (the problem
    handler marks it, ``problems.connection_lost``); any other goes out as it comes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        lost: list[BaseException] = []
        held = False

        async def recording() -> Message:
            message = await receive()
            received.append(message)
            return message

        async def holding(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] == 503 and lost:
                held = True
            if not held:
                await send(message)

        state = dict(scope.get("state") or {})
        token = problems.connection_lost.set(lost)
        try:
            await self.app(scope, recording, holding)
        finally:
            problems.connection_lost.reset(token)
        if not held:
            return
        log.warning("a read lost its database connection (%s); running it again", lost[0])
        replay = iter(received)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        scope["state"] = state
        await self.app(scope, replayed, send)

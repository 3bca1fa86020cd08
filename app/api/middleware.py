"""Per-request id, latency histogram by route template, and an access log line."""

from __future__ import annotations

import logging
import re
import time
import uuid

from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
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

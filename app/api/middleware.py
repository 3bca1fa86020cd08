"""Per-request id, latency histogram by route template, and an access log line."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.logs import request_id
from app.core.metrics import Metrics

log = logging.getLogger("mnemo.access")
SAFE_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers") or ()).get(b"x-request-id", b"").decode("latin-1")
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
            self.metrics.http_latency.labels(scope["method"], template, str(status)).observe(
                elapsed
            )
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

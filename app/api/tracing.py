"""A server span per HTTP request, when tracing is on (app/core/tracing.py).

Named by the route template, never the raw path (ids stay out of span names); the
caller's ``traceparent`` is honoured; no header or body is recorded.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core import tracing

PROPAGATED = (b"traceparent", b"tracestate")


class TracingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            await self.app(scope, receive, send)
            return
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers") or ()
            if k in PROPAGATED
        }
        method = scope["method"]
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with tracing.span(
            f"{method} unmatched",
            kind="server",
            parent=headers,
            attributes={"http.request.method": method},
        ) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                template = getattr(scope.get("route"), "path", "unmatched")
                span.update_name(f"{method} {template}")
                span.set_attribute("http.route", template)
                span.set_attribute("http.response.status_code", status)

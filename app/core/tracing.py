"""Optional OpenTelemetry tracing: off unless ``MNEMO_TRACING=true`` and the ``otel``
extra is installed (``pip install 'mnemo-server[otel]'``).

When on, Mnemo makes spans for HTTP requests (a W3C ``traceparent`` header is honoured),
database statements, LLM calls and jobs. A job stores the trace context of the request
(or job) that enqueued it in its payload (``_trace``), and the worker's span for it
links back to that context, so a compression can be followed from the post that
triggered it. Exporting is configured by the standard ``OTEL_*`` variables (OTLP over
HTTP by default); tests install an in-memory exporter instead (``enable``).

When off, every helper here is a no-op and ``opentelemetry`` is never imported.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

TRACE_KEY = "_trace"  # where a job's payload keeps the trace context it was enqueued in
STATEMENT_CHARS = 300

_tracer: Any = None


def enable(provider: Any = None) -> None:
    """Trace from now on, through ``provider`` (a TracerProvider), or the global one."""
    global _tracer
    from opentelemetry import trace

    _tracer = (provider or trace.get_tracer_provider()).get_tracer("mnemo")


def disable() -> None:
    global _tracer
    _tracer = None


def enabled() -> bool:
    return _tracer is not None


def setup(on: bool) -> None:
    """Called once per process by the app factory and the worker command."""
    if not on or enabled():
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("MNEMO_TRACING is on but the otel extra is not installed: no traces")
        return
    provider = TracerProvider(resource=Resource.create({"service.name": "mnemo"}))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    except ImportError:
        log.warning("no OTLP exporter installed: spans are made but not exported")
    trace.set_tracer_provider(provider)
    enable(provider)


def _context(carrier: Mapping[str, str] | None) -> Any:
    from opentelemetry.propagate import extract

    return extract(dict(carrier)) if carrier else None


@contextlib.contextmanager
def span(
    name: str,
    *,
    kind: str = "internal",
    attributes: Mapping[str, Any] | None = None,
    parent: Mapping[str, str] | None = None,
    link: Mapping[str, str] | None = None,
) -> Iterator[Any]:
    """A span around the block (None when tracing is off). ``parent``: W3C headers of
    the caller (an HTTP request); ``link``: the context a job was enqueued in."""
    if _tracer is None:
        yield None
        return
    from opentelemetry import trace

    links = []
    if link:
        linked = trace.get_current_span(_context(link)).get_span_context()
        if linked.is_valid:
            links.append(trace.Link(linked))
    with _tracer.start_as_current_span(
        name,
        context=_context(parent),
        kind=getattr(trace.SpanKind, kind.upper()),
        attributes=dict(attributes or {}),
        links=links,
    ) as current:
        yield current


def annotate(attributes: Mapping[str, Any]) -> None:
    """Attributes on the current span, when tracing is on."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(dict(attributes))


def carrier() -> dict[str, str] | None:
    """The current trace context as W3C headers, to store with a job; None when off."""
    if _tracer is None:
        return None
    from opentelemetry.propagate import inject

    headers: dict[str, str] = {}
    inject(headers)
    return headers or None


def instrument_engine(engine: Any) -> None:
    """A span per database statement of ``engine`` (an AsyncEngine), when tracing is on."""
    if _tracer is None:
        return
    from opentelemetry import trace
    from sqlalchemy import event

    sync = engine.sync_engine
    if getattr(sync, "_mnemo_traced", False):
        return
    sync._mnemo_traced = True

    @event.listens_for(sync, "before_cursor_execute")
    def _start(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        verb = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "SQL"
        current = _tracer.start_span(
            f"db {verb}",
            kind=trace.SpanKind.CLIENT,
            attributes={"db.system": "postgresql", "db.statement": statement[:STATEMENT_CHARS]},
        )
        conn.info.setdefault("_mnemo_spans", []).append(current)

    @event.listens_for(sync, "after_cursor_execute")
    def _end(conn: Any, *_: Any) -> None:
        spans = conn.info.get("_mnemo_spans")
        if spans:
            spans.pop().end()

    @event.listens_for(sync, "handle_error")
    def _error(context: Any) -> None:
        spans = context.connection.info.get("_mnemo_spans") if context.connection else None
        if spans:
            failed = spans.pop()
            failed.set_status(
                trace.Status(trace.StatusCode.ERROR, type(context.original_exception).__name__)
            )
            failed.end()

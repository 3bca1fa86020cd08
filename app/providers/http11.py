"""An httpx transport for the service's outbound calls (embedding endpoint, LLM): HTTP/1.1
on asyncio, keep-alive connections per origin, responses parsed by httptools (C).

httpx's own transport (httpcore over anyio) cost ~0.9 ms of CPU a call on the benchmark
box against ~0.2 ms for this one (a small JSON POST to a local embedding server): on a
search that embeds its query over HTTP, that CPU is spent on the request's own thread.
Callers still hold an ``httpx.AsyncClient`` (``outbound_client``), so tests keep handing
them ``httpx.MockTransport``.

What it does not do is handed to httpx's transport: HEAD and CONNECT, and a request whose
body is a stream. A client behind a proxy from the environment (HTTP_PROXY, ...) is built
without it: ``outbound_client`` leaves proxies to httpx.

Connections: one request at a time each; an idle one is kept ``keepalive_expiry`` (5 s,
httpx's) and at most ``max_idle`` per origin; one the server closed is dropped when
taken. A request cancelled or timed out closes its connection (its answer may still come).
Timeouts: ``connect`` as httpx's; ``read`` bounds the whole response (httpx's bounds each
read: the same for a server that answers at once, stricter for one that trickles).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.request
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httptools
import httpx

_PORTS = {"http": 80, "https": 443}
_PASSED_ON = frozenset({"HEAD", "CONNECT"})


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: feeds what it reads to the parser, one response at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self.answer: asyncio.Future[None] | None = None
        self.status = 0
        self.keep_alive = False
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.answer is None or self.answer.done():
            self.close()  # nothing was asked: a connection out of step is not reused
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(httpx.RemoteProtocolError(f"malformed HTTP response: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        self.closed = True
        if self.status and not self._framed():
            self.on_message_complete()  # a body without a length ends with the connection
        self.fail(httpx.RemoteProtocolError("server closed the connection before answering"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.fail(httpx.ReadError(f"connection lost: {exc!r}" if exc else "connection lost"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(None)

    def _framed(self) -> bool:
        return any(
            name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.headers
        )

    def expect(self) -> asyncio.Future[None]:
        """The next response: its future, set when the whole message is read."""
        self.status, self.keep_alive, self.headers, self.body = 0, False, [], []
        self.answer = asyncio.get_running_loop().create_future()
        return self.answer

    def fail(self, exc: Exception) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


@dataclass(frozen=True)
class Answer:
    """A response read whole (``KeepAliveTransport.exchange``): what a caller of
    ``httpx.Response`` reads of one, without building one."""

    status_code: int
    headers: list[tuple[bytes, bytes]]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class KeepAliveTransport(httpx.AsyncBaseTransport):
    def __init__(
        self,
        *,
        max_idle: int = 20,
        keepalive_expiry: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._max_idle = max_idle
        self._expiry = keepalive_expiry
        self._ssl = ssl_context
        self._fallback: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method in _PASSED_ON or not isinstance(request.stream, httpx.ByteStream):
            if self._fallback is None:
                self._fallback = httpx.AsyncHTTPTransport()
            return await self._fallback.handle_async_request(request)
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        answer = await self.exchange(
            request.method,
            request.url,
            request.headers.raw,
            request.content,
            connect=timeouts.get("connect"),
            read=timeouts.get("read"),
        )
        return httpx.Response(
            answer.status_code,
            headers=answer.headers,
            stream=httpx.ByteStream(answer.content),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def exchange(
        self,
        method: str,
        url: httpx.URL,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes,
        *,
        connect: float | None,
        read: float | None,
    ) -> Answer:
        """One request, written as given (``headers`` must frame ``body``: its
        Content-Length, and the Host), on a kept-alive connection of ``url``'s origin;
        its response read whole. For a caller that builds its own request bytes:
        ``httpx.AsyncClient``'s request and response objects cost about as much CPU as
        this whole exchange."""
        origin = (url.scheme, url.host, url.port or _PORTS.get(url.scheme, 80))
        idle = self._idle.setdefault(origin, deque())
        conn = self._take(idle) or await self._connect(origin, within=connect)
        head = [b"%s %s HTTP/1.1\r\n" % (method.encode("ascii"), url.raw_path)]
        head.extend(b"%s: %s\r\n" % pair for pair in headers)
        head.append(b"\r\n")
        answered = conn.expect()
        timer = None
        if read is not None:
            timer = asyncio.get_running_loop().call_later(
                read, conn.fail, httpx.ReadTimeout(f"no complete response in {read} s")
            )
        try:
            assert conn.transport is not None
            conn.transport.write(b"".join(head) + body)
            await answered
        except BaseException:
            conn.close()  # cancelled, timed out, or broken: its state is unknown
            raise
        finally:
            if timer is not None:
                timer.cancel()
        answer = Answer(conn.status, conn.headers, b"".join(conn.body))
        self._give_back(idle, conn)
        return answer

    def _take(self, idle: deque[_Connection]) -> _Connection | None:
        """The most recently used idle connection still open and not expired."""
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            alive = conn.transport is not None and not conn.transport.is_closing()
            if alive and not conn.closed and now - conn.idle_since < self._expiry:
                return conn
            conn.close()
        return None

    def _give_back(self, idle: deque[_Connection], conn: _Connection) -> None:
        if conn.keep_alive and not conn.closed and len(idle) < self._max_idle:
            conn.answer = None
            conn.idle_since = time.monotonic()
            idle.append(conn)
        else:
            conn.close()

    async def _connect(self, origin: tuple[str, str, int], *, within: float | None) -> _Connection:
        scheme, host, port = origin
        context = None
        if scheme == "https":
            context = self._ssl = self._ssl or httpx.create_ssl_context()
        elif scheme != "http":
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(within):
                _, conn = await loop.create_connection(_Connection, host, port, ssl=context)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} in {within} s") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        return conn

    async def aclose(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        if self._fallback is not None:
            await self._fallback.aclose()


class OutboundClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` over a ``KeepAliveTransport``, which it keeps at hand
    (``keepalive``) for a caller that sends its own request bytes (the embedder's query
    posts: ``exchange``)."""

    def __init__(self) -> None:
        self.keepalive = KeepAliveTransport()
        super().__init__(transport=self.keepalive)


def outbound_client(transport: str = "keepalive") -> httpx.AsyncClient:
    """The client for the service's outbound calls: ``KeepAliveTransport``, unless
    ``transport`` is "httpx" (``MNEMO_OUTBOUND_HTTP``) or the environment names a proxy
    (httpx's own transport speaks to it)."""
    if transport == "httpx" or urllib.request.getproxies():  # what httpx reads for proxies
        return httpx.AsyncClient()
    return OutboundClient()

"""The outbound HTTP transport (``app.providers.http11``) against real local servers:
an asyncio server scripted per test (connections counted, answers written by hand),
and the embedder on top of it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import orjson
import pytest

from app.providers.embed import EmbeddingBadResponse, EmbeddingUnavailable, OpenAIEmbedder
from app.providers.http11 import KeepAliveTransport, OutboundClient, outbound_client

Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]  # True: keep the connection


class Server:
    """Reads one request at a time per connection (head and Content-Length body) and
    lets ``answer`` write the response."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.closed_by_client = 0
        self.requests: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                if not await self.answer(body, writer):
                    break
        except asyncio.IncompleteReadError:
            self.closed_by_client += 1
        except ConnectionError:
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)


def fixed(body: bytes, *, extra: bytes = b"", keep: bool = True) -> Answer:
    async def answer(_request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (len(body), extra)
            + body
        )
        await writer.drain()
        return keep

    return answer


@contextlib.asynccontextmanager
async def lean(**kwargs: float) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=KeepAliveTransport(**kwargs)) as client:  # type: ignore[arg-type]
        yield client


async def test_requests_reuse_one_kept_alive_connection() -> None:
    async with Server(fixed(b'{"ok": true}')) as server, lean() as client:
        for i in range(5):
            r = await client.post(f"{server.url}/v1/x?i={i}", content=b"abc")
            assert (r.status_code, r.json()) == (200, {"ok": True})
    assert server.connections == 1
    assert [req.split(b"\r\n", 1)[0] for req in server.requests] == [
        b"POST /v1/x?i=%d HTTP/1.1" % i for i in range(5)
    ]
    assert all(req.endswith(b"\r\n\r\nabc") for req in server.requests)


async def test_concurrent_requests_each_get_a_connection_then_share_them() -> None:
    async def slow(body: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.05)
        return await fixed(body)(body, writer)

    async with Server(slow) as server, lean() as client:
        first = await asyncio.gather(
            *(client.post(f"{server.url}/e", content=b"%d" % i) for i in range(3))
        )
        second = await asyncio.gather(
            *(client.post(f"{server.url}/e", content=b"%d" % i) for i in range(3))
        )
    assert [r.content for r in first + second] == [b"0", b"1", b"2"] * 2
    assert server.connections == 3


async def test_a_connection_the_server_closes_is_not_reused() -> None:
    async with Server(fixed(b"{}", extra=b"Connection: close\r\n", keep=False)) as server:
        async with lean() as client:
            for _ in range(3):
                assert (await client.get(f"{server.url}/")).status_code == 200
    assert server.connections == 3


async def test_a_connection_the_server_dropped_while_idle_is_replaced() -> None:
    async with Server(fixed(b"{}", keep=False)) as server, lean() as client:
        # The server closes after answering without saying so: the client sees the
        # close while the connection is idle and does not send on it again.
        assert (await client.get(f"{server.url}/")).status_code == 200
        await asyncio.sleep(0.05)
        assert (await client.get(f"{server.url}/")).status_code == 200
    assert server.connections == 2


async def test_an_idle_connection_past_its_expiry_is_replaced() -> None:
    async with Server(fixed(b"{}")) as server, lean(keepalive_expiry=0.05) as client:
        await client.get(f"{server.url}/")
        await asyncio.sleep(0.1)
        await client.get(f"{server.url}/")
    assert server.connections == 2


async def test_chunked_and_unframed_bodies_are_read_whole() -> None:
    async def chunked(_body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
        )
        return True

    async def unframed(_body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        return False

    async with Server(chunked) as a, Server(unframed) as b, lean() as client:
        assert (await client.get(f"{a.url}/")).content == b"abcdefg"
        assert (await client.get(f"{a.url}/")).content == b"abcdefg"
        assert (await client.get(f"{b.url}/")).content == b"until the end"
    assert a.connections == 1


async def test_headers_status_and_errors_are_httpx_ones() -> None:
    async def teapot(_body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 418 I'm a teapot\r\nX-A: 1\r\nContent-Length: 2\r\n\r\nno")
        return True

    async def broken(_body: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        return False  # closes before the body's end

    async with Server(teapot) as a, Server(broken) as b, lean() as client:
        r = await client.get(f"{a.url}/")
        assert (r.status_code, r.headers["x-a"], r.text) == (418, "1", "no")
        with pytest.raises(httpx.TransportError):
            await client.get(f"{b.url}/")
        closed = Server(fixed(b""))
        async with closed:
            port = closed.port
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")


async def test_a_slow_answer_times_out_and_its_connection_is_dropped() -> None:
    calls = 0

    async def first_slow(body: bytes, writer: asyncio.StreamWriter) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(0.3)
        return await fixed(b"late" if calls == 1 else b"ok")(body, writer)

    async with Server(first_slow) as server, lean() as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(f"{server.url}/", timeout=0.1)
        # not the timed-out connection, whose late answer would be read as this one's
        assert (await client.get(f"{server.url}/")).content == b"ok"
        await asyncio.sleep(0.4)  # the late answer is written; then the server reads on
        assert server.closed_by_client == 1  # the timed-out connection was closed
    assert server.connections == 2


async def test_the_embedder_over_it_reads_its_vectors_on_one_connection() -> None:
    vector = [0.6, 0.8] + [0.0] * 6

    async def embeddings(body: bytes, writer: asyncio.StreamWriter) -> bool:
        asked = orjson.loads(body)
        data = [
            {"index": i, "embedding": base64.b64encode(struct.pack("<8f", *vector)).decode()}
            for i, _ in enumerate(asked["input"])
        ]
        return await fixed(orjson.dumps({"data": data}))(body, writer)

    async with Server(embeddings) as server, lean() as client:
        embedder = OpenAIEmbedder(
            client, base_url=f"{server.url}/v1", api_key="k", model="m", dim=8, query_cache=0
        )
        for text in ("one", "two", "three"):
            [got] = await embedder.embed([text])
            assert got == pytest.approx(vector)
    assert server.connections == 1
    head = server.requests[0].split(b"\r\n\r\n", 1)[0].lower()
    assert b"content-type: application/json" in head
    assert b"authorization: bearer k" in head
    assert orjson.loads(server.requests[0].split(b"\r\n\r\n", 1)[1])["input"] == ["one"]


def vectors_body(request: bytes, vector: list[float]) -> bytes:
    asked = orjson.loads(request)
    data = [
        {
            "index": i,
            "embedding": base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode(),
        }
        for i, _ in enumerate(asked["input"])
    ]
    return orjson.dumps({"data": data})


async def test_the_embedder_over_the_outbound_client_writes_its_own_request() -> None:
    """Over ``outbound_client()`` the embedder writes its request itself (not through
    httpx's objects): one head, the same vectors as through httpx's own transport, and
    its failures are the same ``EmbeddingError``s."""
    vector = [0.6, 0.8] + [0.0] * 6
    statuses = iter([200, 200, 503, 400, 200])

    async def embeddings(body: bytes, writer: asyncio.StreamWriter) -> bool:
        status = next(statuses)
        if status != 200:
            message = b'{"error": "no"}'
            writer.write(
                b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(message), message)
            )
            return True
        return await fixed(vectors_body(body, vector))(body, writer)

    async with Server(embeddings) as server, outbound_client() as client:
        assert isinstance(client, OutboundClient)
        embedder = OpenAIEmbedder(
            client, base_url=f"{server.url}/v1", api_key="k", model="m", dim=8, query_cache=0
        )
        async with httpx.AsyncClient() as plain:
            via_httpx = OpenAIEmbedder(
                plain, base_url=f"{server.url}/v1", api_key="k", model="m", dim=8, query_cache=0
            )
            assert await embedder.embed(["one"]) == await via_httpx.embed(["one"])
        with pytest.raises(EmbeddingUnavailable, match="HTTP 503"):
            await embedder.embed(["two"])
        with pytest.raises(EmbeddingBadResponse, match=re.escape('HTTP 400: {"error": "no"}')):
            await embedder.embed(["three"])
        [got] = await embedder.embed(["four"])
        assert got == pytest.approx(vector)
    port = server.port
    head, body = server.requests[0].split(b"\r\n\r\n", 1)
    assert head.split(b"\r\n") == [
        b"POST /v1/embeddings HTTP/1.1",
        b"Host: 127.0.0.1:%d" % port,
        b"Accept-Encoding: identity",
        b"Content-Type: application/json",
        b"Authorization: Bearer k",
        b"Content-Length: %d" % len(body),
    ]
    assert orjson.loads(body)["input"] == ["one"]
    # the two clients' bodies alike; the outbound client's requests on one connection
    assert server.requests[1].split(b"\r\n\r\n", 1)[1] == body
    assert server.connections == 2


async def test_the_embedder_over_it_reports_an_unreachable_endpoint() -> None:
    closed = Server(fixed(b""))
    async with closed:
        port = closed.port
    async with outbound_client() as client:
        embedder = OpenAIEmbedder(
            client, base_url=f"http://127.0.0.1:{port}/v1", api_key=None, model="m", dim=8
        )
        with pytest.raises(EmbeddingUnavailable):
            await embedder.embed(["x"])


def test_a_proxy_from_the_environment_leaves_the_transport_to_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    assert isinstance(outbound_client()._transport, KeepAliveTransport)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert isinstance(outbound_client()._transport, httpx.AsyncHTTPTransport)


def test_mnemo_outbound_http_httpx_keeps_httpx_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from app.core.config import Settings

    for name in (
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MNEMO_OUTBOUND_HTTP", "httpx")
    chosen = Settings().outbound_http
    assert isinstance(outbound_client(chosen)._transport, httpx.AsyncHTTPTransport)
    assert isinstance(outbound_client("keepalive")._transport, KeepAliveTransport)
    monkeypatch.setenv("MNEMO_OUTBOUND_HTTP", "h2")
    with pytest.raises(ValidationError, match="outbound_http"):
        Settings()

"""A response's head and body leave in one write (``app/api/coalesce.py``), and nothing
is lost, reordered or written after a close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.api.coalesce import CoalescingHttpToolsProtocol, CoalescingTransport

BODY = b'{"messages":"' + b"x" * 20_000 + b'"}'


async def plain(_: Request) -> Response:
    return Response(BODY, media_type="application/json")


async def streamed(_: Request) -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"one,", b"two,", b"three"):
            yield part
            await asyncio.sleep(0)  # the next chunk comes in a later callback

    return StreamingResponse(chunks(), media_type="text/plain")


APP = Starlette(routes=[Route("/plain", plain), Route("/streamed", streamed)])


class RecordingTransport(asyncio.Transport):
    """What the protocol writes, write by write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def serve(protocol_class: type[HttpToolsProtocol], path: str) -> list[bytes]:
    """The writes a keep-alive GET of ``path`` makes through ``protocol_class``."""
    config = Config(app=APP, log_level="warning", access_log=False)
    config.load()
    transport = RecordingTransport()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(transport)
    protocol.data_received(f"GET {path} HTTP/1.1\r\nhost: test\r\n\r\n".encode())
    for _ in range(100):  # until the response is complete and every held write left
        await asyncio.sleep(0)
        if protocol.cycle is not None and protocol.cycle.response_complete:
            await asyncio.sleep(0)
            break
    protocol.connection_lost(None)
    return transport.writes


@pytest.mark.parametrize(
    ("protocol_class", "writes"), [(HttpToolsProtocol, 2), (CoalescingHttpToolsProtocol, 1)]
)
async def test_a_plain_response_is_one_write(
    protocol_class: type[HttpToolsProtocol], writes: int
) -> None:
    out = await serve(protocol_class, "/plain")
    assert len(out) == writes
    assert out[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"".join(out).endswith(b"\r\n\r\n" + BODY)


async def test_a_streamed_response_leaves_whole_and_in_order() -> None:
    plain_bytes = b"".join(await serve(HttpToolsProtocol, "/streamed"))
    coalesced = await serve(CoalescingHttpToolsProtocol, "/streamed")
    assert b"".join(coalesced).split(b"\r\n\r\n", 1)[1] == plain_bytes.split(b"\r\n\r\n", 1)[1]
    assert plain_bytes.endswith(b"0\r\n\r\n")
    assert len(coalesced) > 1  # a chunk after an await is not held back for the next


async def test_a_held_write_leaves_before_a_close_and_not_after_an_abort() -> None:
    loop = asyncio.get_running_loop()
    closed = RecordingTransport()
    coalescing = CoalescingTransport(closed, loop)
    coalescing.write(b"head")
    assert coalescing.get_write_buffer_size() == 4
    coalescing.close()
    assert closed.writes == [b"head"] and closed.closed
    await asyncio.sleep(0)  # the scheduled flush finds nothing held

    aborted = RecordingTransport()
    coalescing = CoalescingTransport(aborted, loop)
    coalescing.write(b"head")
    coalescing.abort()
    await asyncio.sleep(0)
    assert aborted.writes == []


async def test_held_writes_go_out_together_or_at_the_end_of_the_callback() -> None:
    transport = RecordingTransport()
    coalescing = CoalescingTransport(transport, asyncio.get_running_loop())
    coalescing.write(b"a")
    coalescing.write(b"")
    assert transport.writes == []
    coalescing.writelines([b"b", b"c"])
    assert transport.writes == [b"abc"]
    coalescing.write(b"d")
    await asyncio.sleep(0)
    assert transport.writes == [b"abc", b"d"]

"""uvicorn's HTTP/1.1 protocol with a response's head and body in one write.

uvicorn writes a response's status line and headers when the app sends
``http.response.start``, and its body when the app sends ``http.response.body``: two
writes, two TCP segments. A client that wakes on the first (the head alone) parses it,
finds no body yet and waits again, so each response costs it two wake-ups. Here a write
is held until the next one, which goes out with it, or until the event loop's current
callback ends: a plain response leaves in one segment, and nothing waits longer than
the callback that wrote it (a streamed chunk followed by an await goes out then).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """``transport`` with each write held until the next write or the end of the loop's
    current callback (see the module's doc). Everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._held is None:
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        held, self._held = self._held, None
        self._transport.write(held + data)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through a ``CoalescingTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

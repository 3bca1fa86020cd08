"""The rule extractor in a child process, with a deadline.

``re`` holds the GIL while it matches, so running the extractor in a thread does
not keep a runaway match from freezing the event loop that ``mnemo serve`` shares
between the worker and the API. A child process does. The worker sends the child
the turns and the state and waits at most ``deadline_s`` for the units; on a miss
it kills the child (the next call starts a fresh one) and the compression goes on
without units from those turns, saying why (``ExtractionDeadline``), instead of
failing the job and every retry of it.

Children start on first use and stay (starting one costs about a second of
imports, a round trip a few milliseconds); there is one per concurrent call and
at most ``max_idle`` wait between calls. A child reads requests from its stdin
until EOF, so it never outlives its parent. Messages are length-prefixed pickles
on the child's stdin and stdout; only the parent that started it writes to it.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from app.compression.state import TaskState, Unit
from app.core.turns import TurnView

_MODULE = "app.compression.extract.isolated"
DEFAULT_TARGET = "app.compression.extract.rules:extract_units"
_HEADER = struct.Struct(">Q")
_READY = b"R"
_START_TIMEOUT_S = 120.0


class ExtractionDeadline(Exception):
    """The extraction did not finish in time; ``reason`` goes into the audit event."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ExtractionCrashed(RuntimeError):
    """The child raised or died: a bug, not hostile input (the job fails and retries)."""


# ----------------------------------------------------------------------------- wire


def _send(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError("extraction process closed its output")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _receive(stream: IO[bytes]) -> bytes:
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    return _read_exactly(stream, size)


# ---------------------------------------------------------------------------- child


def _resolve(target: str) -> Callable[[Sequence[TurnView], TaskState], list[Unit]]:
    module, _, name = target.partition(":")
    function: Callable[[Sequence[TurnView], TaskState], list[Unit]]
    function = getattr(importlib.import_module(module), name)
    return function


def serve() -> None:
    """The child's loop: one request (target, turns, state) in, one reply out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # The protocol owns the real stdout; a stray print goes to stderr instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = sys.stdin.buffer
    functions: dict[str, Callable[[Sequence[TurnView], TaskState], list[Unit]]] = {}
    _resolve(DEFAULT_TARGET)  # import the extractor before saying ready
    out.write(_READY)
    out.flush()
    while True:
        try:
            target, turns, state = pickle.loads(_receive(requests))
        except EOFError:
            return
        try:
            function = functions.get(target) or functions.setdefault(target, _resolve(target))
            reply = pickle.dumps(("ok", function(turns, state)), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # raised again in the parent, as if extracted there
            reply = _pickled_error(exc)
        _send(out, reply)


def _pickled_error(exc: Exception) -> bytes:
    try:
        return pickle.dumps(("raise", exc), pickle.HIGHEST_PROTOCOL)
    except Exception:  # not picklable: its text will do
        return pickle.dumps(("error", f"{type(exc).__name__}: {exc}"), pickle.HIGHEST_PROTOCOL)


# --------------------------------------------------------------------------- parent


class _Child:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", _MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        if self.stdout.read(1) != _READY:
            self.kill()
            raise ExtractionCrashed("the extraction process did not start")

    def call(self, target: str, turns: Sequence[TurnView], state: TaskState) -> tuple[str, Any]:
        """("ok", units), ("raise", the exception) or ("error", its text)."""
        try:
            _send(self.stdin, pickle.dumps((target, list(turns), state), pickle.HIGHEST_PROTOCOL))
            reply: tuple[str, Any] = pickle.loads(_receive(self.stdout))
        except (OSError, EOFError) as exc:
            raise ExtractionCrashed(f"the extraction process died: {exc}") from exc
        return reply

    def kill(self) -> None:
        self.process.kill()
        self._reap()

    def close(self) -> None:
        self.stdin.close()  # EOF: the child returns from serve()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._reap()

    def _reap(self) -> None:
        self.process.wait()
        for stream in (self.stdin, self.stdout):
            try:
                stream.close()
            except OSError:  # a broken pipe on flush: the child is gone anyway
                pass


class ExtractionProcesses:
    """Child processes that run an extractor function, each call under a deadline."""

    def __init__(self, *, max_idle: int = 2) -> None:
        self.max_idle = max_idle
        self._idle: list[_Child] = []
        self._changed = threading.Condition()  # guards _idle, _starting and started
        self._starting = 0
        self.started = 0  # children started so far (observability, tests)

    def _take(self) -> _Child:
        with self._changed:
            # A child already starting (the prestart) is ready sooner than a new one.
            while not self._idle and self._starting:
                if not self._changed.wait(_START_TIMEOUT_S):
                    break
            if self._idle:
                return self._idle.pop()
            self._starting += 1
            self.started += 1
        return self._start(keep=False)

    def _start(self, *, keep: bool) -> _Child:
        try:
            child = _Child()
        finally:
            with self._changed:
                self._starting -= 1
                self._changed.notify_all()
        if keep:
            self._give_back(child)
        return child

    async def _acquire(self) -> _Child:
        taking = asyncio.ensure_future(asyncio.to_thread(self._take))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            # Cancelled while a child starts (the worker stopping): close it once up.
            taking.add_done_callback(_close_started)
            raise

    def _give_back(self, child: _Child) -> None:
        with self._changed:
            if len(self._idle) < self.max_idle:
                self._idle.append(child)
                self._changed.notify_all()
                return
        child.close()

    async def run(
        self,
        turns: Sequence[TurnView],
        state: TaskState,
        *,
        deadline_s: float,
        target: str = DEFAULT_TARGET,
    ) -> list[Unit]:
        """``target(turns, state)`` in a child; ``ExtractionDeadline`` after ``deadline_s``."""
        child = await self._acquire()  # a start is not counted in the deadline
        try:
            status, value = await asyncio.wait_for(
                asyncio.to_thread(child.call, target, turns, state), deadline_s
            )
        except TimeoutError:
            child.kill()  # the blocked read in the thread ends with EOF
            raise ExtractionDeadline(
                f"rule extraction exceeded its {deadline_s:g} s deadline"
            ) from None
        except BaseException:
            child.kill()
            raise
        self._give_back(child)  # it answered: healthy, whatever the extractor raised
        if status == "raise":
            raise value  # e.g. a pydantic ValidationError, which the caller handles
        if status != "ok":
            raise ExtractionCrashed(value)
        units: list[Unit] = value
        return units

    @property
    def idle(self) -> int:
        """Children started and waiting for a call."""
        return len(self._idle)

    def prestart(self) -> None:
        """Start a child in the background unless one exists, so that the first
        compression does not wait for the extractor's imports (it waits for this one)."""
        with self._changed:
            if self._idle or self.started:
                return
            self._starting += 1
            self.started += 1
        threading.Thread(target=self._prestart, name="extraction-prestart", daemon=True).start()

    def _prestart(self) -> None:
        try:
            self._start(keep=True)
        except (OSError, ExtractionCrashed):  # the first call will try again
            pass

    def close(self) -> None:
        with self._changed:
            idle, self._idle = self._idle, []
        for child in idle:
            child.close()


def _close_started(taking: asyncio.Future[_Child]) -> None:
    if not taking.cancelled() and taking.exception() is None:
        taking.result().close()


_shared: ExtractionProcesses | None = None
_shared_lock = threading.Lock()


def shared_processes() -> ExtractionProcesses:
    """The process-wide children (every worker and test of this process reuses them)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ExtractionProcesses()
            atexit.register(_shared.close)
        return _shared


class IsolatedRuleExtractor:
    """The rule extractor behind the ``Extractor`` contract, in a child process."""

    name = "rules"

    def __init__(
        self,
        *,
        deadline_s: float,
        processes: ExtractionProcesses | None = None,
        target: str = DEFAULT_TARGET,
    ) -> None:
        self.deadline_s = deadline_s
        self.processes = processes
        self.target = target

    async def extract(self, turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
        processes = self.processes or shared_processes()
        return await processes.run(turns, state, deadline_s=self.deadline_s, target=self.target)


if __name__ == "__main__":
    serve()

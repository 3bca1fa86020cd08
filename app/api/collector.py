"""The API process's full garbage collections, run when no request is in flight.

A full collection stops the event loop while it traverses every object the collector
tracks outside the startup heap (set aside: ``wiring.set_aside_startup_objects``): the
bounded caches of the context read (parsed task states, word sets: ~55,000 objects
on ``bench.latency``'s data) and what requests leave behind. CPython runs one once
enough young collections have promoted enough objects, so in the middle of requests:
on ``bench.latency`` each took 20-110 ms of wall time, every request in flight waited
it out, and the one that fell in an 8-client phase of 2,000 context reads made its
slowest 1 % (``bench.tail``: the reads at the p99 were those in flight during it).

``IdleCollector`` turns CPython's automatic full collections off (the young ones
stay) and runs them itself: once one is due (as many young collections since the last
as CPython's threshold asks), when no request has been in flight for ``IDLE_S``; a
process that is never that idle gets it anyway ``LATE_S`` after it was due, so cyclic
garbage still goes, at most that much later.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time

IDLE_S = 0.05  # no request in flight for this long: a full collection delays no one
LATE_S = 30.0  # due this long with no such moment: collected anyway, under load
CHECK_S = 0.5  # how often whether one is due is looked at
NEVER = 2**31 - 1  # a threshold the collector never reaches

_users = 0  # running collectors in this process (tests run several apps)
_automatic: tuple[int, int, int] | None = None  # the thresholds they replaced


def should_collect(
    *, now: float, due_since: float | None, in_flight: int, last_done: float
) -> bool:
    """Whether a full collection runs now: it is due, and either no request has been
    in flight since ``IDLE_S`` ago, or it has been due for ``LATE_S``."""
    if due_since is None:
        return False
    idle = in_flight == 0 and now - last_done >= IDLE_S
    return idle or now - due_since >= LATE_S


def _full_collections() -> int:
    return int(gc.get_stats()[2]["collections"])


def _young_collections() -> int:
    return int(gc.get_stats()[1]["collections"])


class IdleCollector:
    """Counts the requests in flight (``started``, ``finished``: the observability
    middleware calls them) and runs the full collections between them."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_done = time.monotonic()
        self._due_since: float | None = None
        self._every = 10  # young collections between two full ones (CPython's threshold)
        self._young_at_last = 0
        self._full_at_last = 0
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def started(self) -> None:
        self.in_flight += 1

    def finished(self) -> None:
        self.in_flight -= 1
        self.last_done = time.monotonic()
        if (
            not self.in_flight
            and self._due_since is not None
            and self._timer is None
            and self._task is not None
        ):
            # Looked at again once IDLE_S have gone by (collected if still quiet then).
            self._timer = asyncio.get_running_loop().call_later(IDLE_S, self._quiet)

    def _quiet(self) -> None:
        self._timer = None
        self.collect_if_due()
        if self._due_since is not None and not self.in_flight:
            # Requests came and went meanwhile: again once the last is IDLE_S old.
            wait = max(0.0, self.last_done + IDLE_S - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(wait, self._quiet)

    def start(self) -> None:
        """Take the full collections over from CPython (on the running loop)."""
        global _users, _automatic
        if self._task is not None:
            return
        if _users == 0:
            _automatic = gc.get_threshold()
            gc.set_threshold(_automatic[0], _automatic[1], NEVER)
        _users += 1
        assert _automatic is not None
        self._every = max(1, _automatic[2])
        self._young_at_last, self._full_at_last = _young_collections(), _full_collections()
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        """Give the full collections back to CPython."""
        global _users
        task, self._task = self._task, None
        if task is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        _users -= 1
        if _users == 0 and _automatic is not None:
            gc.set_threshold(*_automatic)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_S)
            self.collect_if_due()

    def collect_if_due(self) -> None:
        """Mark a full collection due once enough young ones ran; run it if it should."""
        if _full_collections() != self._full_at_last:  # someone else ran one (gc.collect)
            self._young_at_last, self._full_at_last = _young_collections(), _full_collections()
            self._due_since = None
        now = time.monotonic()
        if self._due_since is None and _young_collections() - self._young_at_last >= self._every:
            self._due_since = now
        if should_collect(
            now=now, due_since=self._due_since, in_flight=self.in_flight, last_done=self.last_done
        ):
            gc.collect()
            self._young_at_last, self._full_at_last = _young_collections(), _full_collections()
            self._due_since = None

"""`mnemo serve`'s job worker child: kept alive, and kept from starving.

``mnemo serve`` runs its job worker as a child process at the lowest CPU priority
(Linux's SCHED_IDLE, every thread): the API is served first. On a machine whose CPU is
never idle such a worker never runs, and a session whose compressions never run grows
without bound. A process cannot leave SCHED_IDLE or lower its niceness again without
CAP_SYS_NICE, neither the worker nor serve for it; but serve can start a *new* child at
any priority at or below its own. So ``LagGuard`` watches the queue's lag (how long
the longest-waiting due job has waited) and, past ``MNEMO_WORKER_LAG_LIMIT_S``, replaces
the idle-class worker with one at its niceness alone (a share of the CPU however busy
the machine), and with an idle-class one again once the backlog has cleared.

A units job (``read_units``: what a bulk post's user turns state) has a limit of its own,
``MNEMO_WORKER_UNITS_LAG_LIMIT_S`` (a few seconds): until it has run, every API process
reads those turns from their text on its first context read of the session, 13-19 ms of
its event loop that the reads queued behind it wait out. Past it serve switches to a
spare worker it keeps started (``KeptAlive``'s standby) at ``MNEMO_WORKER_UNITS_NICE``
(the API's own priority) until no units job is left (and none came for as long again),
then idle-class again; a backlog of compressions and indexing alone still waits the
long limit.

A replaced worker gets SIGTERM: its running jobs are cancelled, their transactions roll
back, and it hands every job it held back to the queue (``Worker`` in ``app/worker.py``;
an idle-class worker at once, without the grace a niced one gives its running jobs), so
the new worker claims them at once. (Before, they waited out their lease,
``MNEMO_JOB_LEASE_S``: a burst's drain took ~30 s longer with the guard than without.)
A job's effect and its completion commit together, and only the lease holder may commit
(``services.jobs``), so a replacement loses and duplicates nothing; a worker killed
before it could hand its jobs back leaves them to their leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


class WorkerMode(enum.Enum):
    """The CPU priority serve's worker child runs at, and why."""

    IDLE = "idle"  # SCHED_IDLE and MNEMO_WORKER_NICE: only CPU time nothing else wants
    NICED = "niced"  # MNEMO_WORKER_NICE alone: a share of the CPU, never starved
    # Normal policy at MNEMO_WORKER_UNITS_NICE (0 by default), for the units jobs only:
    # idle-class again once they are done.
    NICED_FOR_UNITS = "niced for units"


# Back to idle-class once no due job has waited more than this share of the limit: the
# hysteresis keeps a worker that just keeps up from being replaced back and forth.
CLEARED_SHARE = 0.25
# How often serve looks at the queue's lag (a quarter of a limit below 20 s, 0.5 s at least).
LAG_CHECK_EVERY_S = 5.0


# Given to a spare worker's command line (``KeptAlive``'s standby).
STANDBY_FLAG = "--standby"

# How long serve waits for a replaced idle-class worker to exit before it kills it: one
# that gets no CPU could take minutes to hand its jobs back, and they would wait for it
# (its units jobs too); serve hands them back for it (``LagGuard``).
IDLE_STOP_S = 2.0


@dataclass(frozen=True)
class Lags:
    """What the guard reads from the queue at a look, in seconds."""

    due_s: float | None  # the longest-waiting due job (None: no job is due)
    units_s: float | None  # the oldest units job not done, queued or running (None: none)
    units_quiet_s: float = 0.0  # since the last look that saw a units job not done


@dataclass(frozen=True)
class Limits:
    """How long a due job, and a units job, may wait before the worker is niced."""

    due_s: float
    units_s: float = 0.0  # 0: a units job waits ``due_s`` like any other


def next_mode(mode: WorkerMode, lags: Lags, limits: Limits) -> WorkerMode:
    """The worker's mode after a look at the queue. The units jobs go first: while one is
    late, or left after one was (until none came for as long as one may wait: a bulk post
    every few seconds would otherwise switch the worker twice each), the worker runs at
    the units' niceness, which drains the rest too."""
    if limits.units_s > 0:
        late = lags.units_s is not None and lags.units_s > limits.units_s
        left = lags.units_s is not None or lags.units_quiet_s < limits.units_s
        if late or (mode is WorkerMode.NICED_FOR_UNITS and left):
            return WorkerMode.NICED_FOR_UNITS
    if lags.due_s is not None and lags.due_s > limits.due_s:
        return WorkerMode.NICED
    if mode is WorkerMode.NICED and lags.due_s is not None:
        if lags.due_s > limits.due_s * CLEARED_SHARE:
            return WorkerMode.NICED  # catching up, not caught up: no back and forth
    return WorkerMode.IDLE


def mode_environment(mode: WorkerMode, *, nice: int, units_nice: int) -> dict[str, str]:
    """The settings a worker child of ``mode`` is started with: idle-class or not, and
    its niceness (``units_nice`` for the units jobs, ``nice`` otherwise)."""
    niceness = units_nice if mode is WorkerMode.NICED_FOR_UNITS else nice
    idle = "true" if mode is WorkerMode.IDLE else "false"
    return {"MNEMO_WORKER_IDLE": idle, "MNEMO_WORKER_NICE": str(niceness)}


def check_every(limits: Limits) -> float:
    """How often serve looks at the queue: a quarter of the shorter limit, 0.5 s at least,
    ``LAG_CHECK_EVERY_S`` at most."""
    shortest = min(limit for limit in (limits.due_s, limits.units_s) if limit > 0)
    return min(LAG_CHECK_EVERY_S, max(0.5, shortest / 4))


def wait_until_promoted() -> bool:
    """In a spare worker (``STANDBY_FLAG``): wait for serve's word on stdin. False when
    serve closed it without one (it is stopping). A promoted spare lets go of its stdin
    (/dev/null instead): what tells it from a waiting one from outside."""
    word = sys.stdin.buffer.readline()
    with open(os.devnull, "rb") as null:
        os.dup2(null.fileno(), 0)
    return bool(word)


def worker_name(pid: int) -> str:
    """The name a job worker claims its jobs under (``app.worker.Worker.name``)."""
    return f"{socket.gethostname()}:{pid}"


class KeptAlive:
    """A child process started again whenever it exits, until ``stop``: the job worker of
    ``mnemo serve`` (uvicorn restarts the API processes itself).

    A watcher thread waits on the child. A child that dies within ``STABLE_S`` of its
    start is restarted after a delay that doubles up to ``MAX_DELAY_S`` (a worker that
    cannot start, e.g. a broken configuration, does not spin); one that ran longer is
    restarted after ``MIN_DELAY_S``. ``replace`` starts the child again with other
    settings (the old one stopped as by ``stop``); restarts keep them.

    With ``standby_env``, a spare child with those settings is kept started beside it
    (``STANDBY_FLAG``: it has imported and connected, and waits for a line on its stdin),
    while the child runs with other settings: a ``replace`` to them takes the spare, at
    once, instead of starting one (a worker's start is ~1.3 s of CPU, 8 s and more at
    niceness 10 on a busy machine). It costs a process's memory (~110 MB), no CPU.
    """

    MIN_DELAY_S = 1.0
    MAX_DELAY_S = 30.0
    STABLE_S = 60.0

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        *,
        standby_env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = argv
        self.env = dict(env or {})
        self.standby_env = None if standby_env is None else dict(standby_env)
        self.process: subprocess.Popen[bytes] | None = None
        self.standby: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="job-worker", daemon=True)

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, env=os.environ | self.env)

    def start(self) -> None:
        with self._lock:
            self.process = self._spawn()
            self._keep_standby()
        self._watcher.start()

    def _keep_standby(self) -> None:
        """Start the spare if there is none and the child runs with other settings."""
        wanted = self.standby_env is not None and self.env | self.standby_env != self.env
        if self.standby is not None and self.standby.poll() is not None:
            _close_stdin(self.standby)  # it died waiting
            self.standby = None
        if wanted and self.standby is None:
            self.standby = subprocess.Popen(
                [*self.argv, STANDBY_FLAG],
                env=os.environ | self.env | (self.standby_env or {}),
                stdin=subprocess.PIPE,
            )

    def _take_standby(self) -> subprocess.Popen[bytes] | None:
        """The spare, told to work, if it runs with the child's settings now."""
        spare, wanted = self.standby, self.standby_env or {}
        if spare is None or self.env | wanted != self.env or spare.poll() is not None:
            return None
        self.standby = None
        assert spare.stdin is not None
        try:
            spare.stdin.write(b"work\n")
            spare.stdin.flush()
        except OSError:  # it died just now
            return None
        finally:
            _close_stdin(spare)
        return spare

    def replace(
        self, env: Mapping[str, str], timeout_s: float = 30.0
    ) -> subprocess.Popen[bytes] | None:
        """Start the child with ``env`` added to its settings, then stop the old one
        (SIGTERM, SIGKILL after ``timeout_s``) without waiting for it: the old one may be
        starved of CPU, the new one works meanwhile (the queue's leases keep them apart).
        Returns the old one."""
        with self._lock:
            if self._stopping.is_set():
                return None
            self.env |= env
            old, self.process = self.process, self._take_standby() or self._spawn()
            self._keep_standby()
        if old is not None:
            threading.Thread(
                target=_terminate, args=(old, timeout_s), name="job-worker-stop", daemon=True
            ).start()
        return old

    def _watch(self) -> None:
        delay = self.MIN_DELAY_S
        while True:
            process = self.process
            assert process is not None
            started = time.monotonic()
            code = process.wait()
            if self._stopping.is_set():
                return
            if process is not self.process:  # replaced: watch its successor
                continue
            delay = self.MIN_DELAY_S if time.monotonic() - started > self.STABLE_S else delay
            print(
                f"mnemo serve: the job worker exited ({code}); starting it again in {delay:.0f} s",
                file=sys.stderr,
            )
            if self._stopping.wait(delay):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                if process is self.process:  # not replaced meanwhile
                    self.process = self._spawn()
                    self.restarts += 1
            delay = min(delay * 2, self.MAX_DELAY_S)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop restarting, then SIGTERM the child (SIGKILL after ``timeout_s``)."""
        with self._lock:
            self._stopping.set()
            process, spare = self.process, self.standby
        if spare is not None:
            _close_stdin(spare)  # it ends without working
            _terminate(spare, timeout_s)
        if process is None:
            return
        _terminate(process, timeout_s)
        self._watcher.join(5)


def _close_stdin(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()


def _terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM (and SIGCONT, should it be stopped), SIGKILL after ``timeout_s``."""
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
        os.kill(process.pid, signal.SIGCONT)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class LagGuard:
    """Every ``every_s``, reads the queue's lags and switches ``worker``'s mode by
    ``next_mode``; a thread of serve's own, with its own event loop and one database
    connection (two small queries every second or so: nothing the API notices).

    An idle-class worker it replaces is killed after ``IDLE_STOP_S``, and the jobs it
    still held are handed back by the guard (``queue.hand_back`` under its name): they
    are claimable at once, not when their leases expire."""

    def __init__(
        self,
        worker: KeptAlive,
        database_url: str,
        *,
        limits: Limits,
        every_s: float,
        nice: int = 10,
        units_nice: int = 0,
    ) -> None:
        self.worker = worker
        self.url = database_url
        self.limits = limits
        self.nice, self.units_nice = nice, units_nice
        self.every_s = every_s
        self.mode = WorkerMode.IDLE
        self.switches = 0
        self.replaced: list[subprocess.Popen[bytes]] = []  # their jobs not handed back yet
        self._units_seen = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="job-worker-lag", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _main(self) -> None:
        asyncio.run(self._watch())

    async def _watch(self) -> None:
        from sqlalchemy.exc import DBAPIError, OperationalError

        from app.stores.engine import make_engine

        engine = make_engine(self.url, pool_size=1, name="mnemo-serve")
        try:
            while not await asyncio.to_thread(self._stop.wait, self.every_s):
                try:
                    async with engine.connect() as conn:
                        await self._hand_back_ended(conn)
                        lags = await self.read_lags(conn)
                except (OSError, DBAPIError, OperationalError):
                    continue  # the database is restarting: look again later
                self.observe(lags)
        finally:
            await engine.dispose()

    async def read_lags(self, conn: AsyncConnection) -> Lags:
        from app.core.jobs import JobKind
        from app.stores import queue

        units = None
        if self.limits.units_s > 0:
            units = await queue.oldest_unfinished_s(conn, kind=JobKind.READ_UNITS)
        now = time.monotonic()
        if units is not None:
            self._units_seen = now
        return Lags(await queue.oldest_due_s(conn), units, now - self._units_seen)

    async def _hand_back_ended(self, conn: AsyncConnection) -> None:
        """Hand back the jobs of the replaced workers that have exited (none, when one
        stopped as asked: it handed them back itself)."""
        from app.stores import queue

        for old in [p for p in self.replaced if p.poll() is not None]:
            handed = await queue.hand_back(conn, worker=worker_name(old.pid))
            await conn.commit()
            self.replaced.remove(old)
            if handed:
                print(
                    f"mnemo serve: handed back job(s) {handed} of the job worker it replaced",
                    file=sys.stderr,
                )

    def environment(self, mode: WorkerMode) -> dict[str, str]:
        return mode_environment(mode, nice=self.nice, units_nice=self.units_nice)

    def observe(self, lags: Lags) -> None:
        """Switch the worker's mode if ``lags`` call for it; the worker is replaced only
        when its CPU policy changes."""
        before, mode = self.mode, next_mode(self.mode, lags, self.limits)
        self.mode = mode
        if self.environment(mode) == self.environment(before):
            return
        why = _why(mode, lags, self.limits, before)
        print(f"mnemo serve: {why}; the job worker restarts {mode.value}", file=sys.stderr)
        self.switches += 1
        stop_s = IDLE_STOP_S if before is WorkerMode.IDLE else 30.0
        old = self.worker.replace(self.environment(mode), stop_s)
        if old is not None:
            self.replaced.append(old)


def _why(mode: WorkerMode, lags: Lags, limits: Limits, before: WorkerMode) -> str:
    if mode is WorkerMode.NICED:
        return f"a job has waited {lags.due_s or 0:.0f} s (limit {limits.due_s:g} s)"
    if mode is WorkerMode.NICED_FOR_UNITS:
        return f"a units job has waited {lags.units_s or 0:.0f} s (limit {limits.units_s:g} s)"
    if before is WorkerMode.NICED_FOR_UNITS:
        return "the units jobs are done"
    return "the backlog has cleared"

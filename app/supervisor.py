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
import subprocess
import sys
import threading
import time
from collections.abc import Mapping


class WorkerMode(enum.Enum):
    """The CPU priority serve's worker child runs at."""

    IDLE = "idle"  # SCHED_IDLE and MNEMO_WORKER_NICE: only CPU time nothing else wants
    NICED = "niced"  # MNEMO_WORKER_NICE alone: a share of the CPU, never starved


# Back to idle-class once no due job has waited more than this share of the limit: the
# hysteresis keeps a worker that just keeps up from being replaced back and forth.
CLEARED_SHARE = 0.25
# How often serve looks at the queue's lag (a quarter of a limit below 20 s, 0.5 s at least).
LAG_CHECK_EVERY_S = 5.0


def next_mode(mode: WorkerMode, lag_s: float | None, limit_s: float) -> WorkerMode:
    """The worker's mode after a look at the queue whose longest-waiting due job has
    waited ``lag_s`` (None: no job is due)."""
    if mode is WorkerMode.IDLE and lag_s is not None and lag_s > limit_s:
        return WorkerMode.NICED
    if mode is WorkerMode.NICED and (lag_s is None or lag_s <= limit_s * CLEARED_SHARE):
        return WorkerMode.IDLE
    return mode


def mode_environment(mode: WorkerMode) -> dict[str, str]:
    """The settings a worker child of ``mode`` is started with."""
    return {"MNEMO_WORKER_IDLE": "true" if mode is WorkerMode.IDLE else "false"}


class KeptAlive:
    """A child process started again whenever it exits, until ``stop``: the job worker of
    ``mnemo serve`` (uvicorn restarts the API processes itself).

    A watcher thread waits on the child. A child that dies within ``STABLE_S`` of its
    start is restarted after a delay that doubles up to ``MAX_DELAY_S`` (a worker that
    cannot start, e.g. a broken configuration, does not spin); one that ran longer is
    restarted after ``MIN_DELAY_S``. ``replace`` starts the child again with other
    settings (the old one stopped as by ``stop``); restarts keep them.
    """

    MIN_DELAY_S = 1.0
    MAX_DELAY_S = 30.0
    STABLE_S = 60.0

    def __init__(self, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        self.argv = argv
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="job-worker", daemon=True)

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, env=os.environ | self.env)

    def start(self) -> None:
        self.process = self._spawn()
        self._watcher.start()

    def replace(self, env: Mapping[str, str], timeout_s: float = 30.0) -> None:
        """Start the child with ``env`` added to its settings, then stop the old one
        (SIGTERM, SIGKILL after ``timeout_s``) without waiting for it: the old one may be
        starved of CPU, the new one works meanwhile (the queue's leases keep them apart)."""
        with self._lock:
            if self._stopping.is_set():
                return
            self.env |= env
            old, self.process = self.process, self._spawn()
        if old is not None:
            threading.Thread(
                target=_terminate, args=(old, timeout_s), name="job-worker-stop", daemon=True
            ).start()

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
            process = self.process
        if process is None:
            return
        _terminate(process, timeout_s)
        self._watcher.join(5)


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
    """Every ``every_s``, reads the queue's lag and switches ``worker``'s mode by
    ``next_mode``; a thread of serve's own, with its own event loop and one database
    connection (a query every few seconds: nothing the API notices)."""

    def __init__(
        self, worker: KeptAlive, database_url: str, *, limit_s: float, every_s: float
    ) -> None:
        self.worker = worker
        self.url = database_url
        self.limit_s = limit_s
        self.every_s = every_s
        self.mode = WorkerMode.IDLE
        self.switches = 0
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

        from app.stores import queue
        from app.stores.engine import make_engine

        engine = make_engine(self.url, pool_size=1, name="mnemo-serve")
        try:
            while not await asyncio.to_thread(self._stop.wait, self.every_s):
                try:
                    async with engine.connect() as conn:
                        lag = await queue.oldest_due_s(conn)
                except (OSError, DBAPIError, OperationalError):
                    continue  # the database is restarting: look again later
                self.observe(lag)
        finally:
            await engine.dispose()

    def observe(self, lag_s: float | None) -> None:
        """Switch the worker's mode if ``lag_s`` calls for it."""
        mode = next_mode(self.mode, lag_s, self.limit_s)
        if mode is self.mode:
            return
        why = (
            f"a job has waited {lag_s:.0f} s (limit {self.limit_s:g} s)"
            if mode is WorkerMode.NICED
            else "the backlog has cleared"
        )
        print(f"mnemo serve: {why}; the job worker restarts {mode.value}", file=sys.stderr)
        self.mode = mode
        self.switches += 1
        self.worker.replace(mode_environment(mode))

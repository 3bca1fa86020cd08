"""`mnemo serve`'s job worker child: the lag guard's decisions, and the replacement of
the child (real processes; the guard against a real queue is in tests/e2e)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.supervisor import KeptAlive, LagGuard, WorkerMode, mode_environment, next_mode

IDLE, NICED = WorkerMode.IDLE, WorkerMode.NICED


@pytest.mark.parametrize(
    ("mode", "lag_s", "expected"),
    [
        (IDLE, None, IDLE),  # nothing due
        (IDLE, 10.0, IDLE),
        (IDLE, 60.0, IDLE),  # at the limit: not past it
        (IDLE, 60.5, NICED),
        (IDLE, 3600.0, NICED),
        (NICED, 3600.0, NICED),  # still behind
        (NICED, 30.0, NICED),  # catching up, not caught up: no back and forth
        (NICED, 15.1, NICED),
        (NICED, 15.0, IDLE),  # a quarter of the limit: cleared
        (NICED, 0.0, IDLE),
        (NICED, None, IDLE),
    ],
)
def test_the_worker_is_niced_past_the_limit_and_idle_once_the_backlog_cleared(
    mode: WorkerMode, lag_s: float | None, expected: WorkerMode
) -> None:
    assert next_mode(mode, lag_s, limit_s=60.0) is expected


def test_each_mode_starts_the_worker_with_its_own_policy() -> None:
    assert mode_environment(IDLE) == {"MNEMO_WORKER_IDLE": "true"}
    assert mode_environment(NICED) == {"MNEMO_WORKER_IDLE": "false"}


class Replacements(KeptAlive):
    def __init__(self) -> None:
        super().__init__([])
        self.envs: list[dict[str, str]] = []

    def replace(self, env: object, timeout_s: float = 30.0) -> None:
        assert isinstance(env, dict)
        self.envs.append(env)


def test_the_guard_replaces_the_worker_once_per_switch() -> None:
    worker = Replacements()
    guard = LagGuard(worker, "unused", limit_s=60.0, every_s=5.0)
    for lag in (None, 30.0, 61.0, 120.0, 40.0, 20.0, 15.0, 0.0, None, 59.0, 61.0):
        guard.observe(lag)
    assert worker.envs == [
        {"MNEMO_WORKER_IDLE": "false"},
        {"MNEMO_WORKER_IDLE": "true"},
        {"MNEMO_WORKER_IDLE": "false"},
    ]
    assert guard.mode is NICED and guard.switches == 3


CHILD = "import os, time; print(os.environ.get('MODE'), flush=True); time.sleep(60)"


def _wait(condition: object, timeout_s: float = 20.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _environ(process: subprocess.Popen[bytes]) -> dict[str, str]:
    """The child's environment, once it runs CHILD: between fork and exec /proc shows
    the parent's (a loaded box can stretch that gap past the first read)."""
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    _wait(lambda: CHILD.encode() in cmdline.read_bytes())
    raw = Path(f"/proc/{process.pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode() for k, v in pairs}


def test_a_replaced_child_is_stopped_and_its_successor_kept_alive() -> None:
    """The old child is stopped (even a stopped one: SIGCONT with the SIGTERM), not
    restarted; the new one has the new settings, and so has its restart after it died."""
    kept = KeptAlive([sys.executable, "-c", CHILD], env={"MODE": "idle"})
    kept.MIN_DELAY_S = 0.05
    kept.start()
    try:
        first = kept.process
        assert first is not None
        assert _environ(first)["MODE"] == "idle"
        os.kill(first.pid, signal.SIGSTOP)  #: a worker that gets no CPU at all
        kept.replace({"MODE": "niced"})
        second = kept.process
        assert second is not None and second is not first
        _wait(lambda: first.poll() is not None)
        assert _environ(second)["MODE"] == "niced"
        time.sleep(0.3)  # the watcher saw the old one exit: no restart for it
        assert kept.process is second and kept.restarts == 0
        second.kill()
        _wait(lambda: kept.process is not second)
        third = kept.process
        assert third is not None and kept.restarts == 1
        assert _environ(third)["MODE"] == "niced"
    finally:
        kept.stop(timeout_s=5)
    assert all(p.poll() is not None for p in (first, second))

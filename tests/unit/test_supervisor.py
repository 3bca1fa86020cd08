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

from app.supervisor import (
    IDLE_STOP_S,
    STANDBY_FLAG,
    KeptAlive,
    LagGuard,
    Lags,
    Limits,
    WorkerMode,
    check_every,
    mode_environment,
    next_mode,
)

IDLE, NICED, UNITS = WorkerMode.IDLE, WorkerMode.NICED, WorkerMode.NICED_FOR_UNITS
LIMIT = Limits(due_s=60.0)  # the units jobs wait like any other
BOTH = Limits(due_s=60.0, units_s=3.0)


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
    assert next_mode(mode, Lags(lag_s, None), LIMIT) is expected
    # with no units job, the units limit changes nothing
    assert next_mode(mode, Lags(lag_s, None, units_quiet_s=100.0), BOTH) is expected


@pytest.mark.parametrize(
    ("mode", "lags", "expected"),
    [
        (IDLE, Lags(2.0, 2.0), IDLE),  # waiting, not late yet
        (IDLE, Lags(3.0, 3.0), IDLE),  # at the limit: not past it
        (IDLE, Lags(3.5, 3.5), UNITS),
        (IDLE, Lags(None, 3.5), UNITS),  # running in a worker that gets no CPU
        (IDLE, Lags(0.0, 40.0), UNITS),  # the other jobs are not late
        (IDLE, Lags(61.0, 61.0), UNITS),  # both late: the units first
        (UNITS, Lags(61.0, 5.0), UNITS),
        (UNITS, Lags(5.0, 5.0), UNITS),
        (UNITS, Lags(None, 0.5), UNITS),  # not done: the last one runs
        (UNITS, Lags(20.0, None, units_quiet_s=1.0), UNITS),  # done, but another may come
        (UNITS, Lags(20.0, None, units_quiet_s=3.0), IDLE),  # none for as long: idle,
        (UNITS, Lags(None, None, units_quiet_s=3.0), IDLE),  # whatever else waits,
        (UNITS, Lags(61.0, None, units_quiet_s=9.0), NICED),  # unless it is late
        (NICED, Lags(40.0, None, units_quiet_s=9.0), NICED),  # not caught up
        (NICED, Lags(40.0, 1.0), NICED),  # a units job, not late: the niced worker runs it
        (NICED, Lags(40.0, 3.5), UNITS),  # late: at the units' niceness
        (NICED, Lags(10.0, 1.0), IDLE),  # caught up: an idle-class worker, until it is late
    ],
)
def test_a_late_units_job_switches_the_worker_until_none_is_left(
    mode: WorkerMode, lags: Lags, expected: WorkerMode
) -> None:
    assert next_mode(mode, lags, BOTH) is expected


def test_without_a_units_limit_a_units_job_waits_the_backlogs_limit() -> None:
    assert next_mode(IDLE, Lags(30.0, 30.0), LIMIT) is IDLE
    assert next_mode(IDLE, Lags(61.0, 61.0), LIMIT) is NICED


def test_each_mode_starts_the_worker_with_its_own_policy() -> None:
    def env(mode: WorkerMode) -> dict[str, str]:
        return mode_environment(mode, nice=10, units_nice=0)

    assert env(IDLE) == {"MNEMO_WORKER_IDLE": "true", "MNEMO_WORKER_NICE": "10"}
    assert env(NICED) == {"MNEMO_WORKER_IDLE": "false", "MNEMO_WORKER_NICE": "10"}
    assert env(UNITS) == {"MNEMO_WORKER_IDLE": "false", "MNEMO_WORKER_NICE": "0"}


@pytest.mark.parametrize(
    ("limits", "every_s"),
    [
        (Limits(60.0), 5.0),
        (Limits(10.0), 2.5),
        (Limits(1.0), 0.5),
        (Limits(60.0, 3.0), 0.75),
        (Limits(2.0, 30.0), 0.5),
    ],
)
def test_the_queue_is_looked_at_four_times_within_the_shorter_limit(
    limits: Limits, every_s: float
) -> None:
    assert check_every(limits) == every_s


class Replacements(KeptAlive):
    def __init__(self) -> None:
        super().__init__([])
        self.envs: list[tuple[dict[str, str], float]] = []

    def replace(self, env: object, timeout_s: float = 30.0) -> None:
        assert isinstance(env, dict)
        self.envs.append((env, timeout_s))


def test_the_guard_replaces_the_worker_once_per_switch() -> None:
    worker = Replacements()
    guard = LagGuard(worker, "unused", limits=LIMIT, every_s=5.0)
    for lag in (None, 30.0, 61.0, 120.0, 40.0, 20.0, 15.0, 0.0, None, 59.0, 61.0):
        guard.observe(Lags(lag, None))
    assert [env["MNEMO_WORKER_IDLE"] for env, _ in worker.envs] == ["false", "true", "false"]
    assert guard.mode is NICED and guard.switches == 3


def test_an_idle_class_worker_replaced_is_given_a_short_while_to_stop() -> None:
    """To the units' niceness, then the backlog's, then idle-class: the idle-class
    worker is killed after IDLE_STOP_S if it has not stopped (it may get no CPU), a niced
    one is given the usual time."""
    worker = Replacements()
    guard = LagGuard(worker, "unused", limits=BOTH, every_s=1.0, nice=10, units_nice=0)
    for lags in (
        Lags(2.0, 2.0),
        Lags(4.0, 4.0),
        Lags(61.0, None, units_quiet_s=1.0),
        Lags(61.0, None, units_quiet_s=5.0),
        Lags(10.0, None, units_quiet_s=9.0),
    ):
        guard.observe(lags)
    assert worker.envs == [
        ({"MNEMO_WORKER_IDLE": "false", "MNEMO_WORKER_NICE": "0"}, IDLE_STOP_S),
        ({"MNEMO_WORKER_IDLE": "false", "MNEMO_WORKER_NICE": "10"}, 30.0),
        ({"MNEMO_WORKER_IDLE": "true", "MNEMO_WORKER_NICE": "10"}, 30.0),
    ]
    assert guard.mode is IDLE and guard.switches == 3


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


SPARE = (
    "import os, sys, time\n"
    "from app.supervisor import STANDBY_FLAG, wait_until_promoted\n"
    "if STANDBY_FLAG not in sys.argv or wait_until_promoted():\n"
    "    print(os.environ.get('MODE'), flush=True); time.sleep(60)\n"
)


def _stdin(process: subprocess.Popen[bytes]) -> str:
    return os.readlink(f"/proc/{process.pid}/fd/0")


def test_a_replace_to_the_spares_settings_takes_the_spare_and_starts_no_child() -> None:
    """The spare waits started, with its settings, while the child runs with others; a
    replace to them tells it to work (no new child); back to the others, a new child
    and a new spare; stop ends them all."""
    kept = KeptAlive(
        [sys.executable, "-c", SPARE], env={"MODE": "idle"}, standby_env={"MODE": "niced"}
    )
    kept.start()
    try:
        first, spare = kept.process, kept.standby
        assert first is not None and spare is not None
        assert STANDBY_FLAG in Path(f"/proc/{spare.pid}/cmdline").read_bytes().decode()
        assert _stdin(spare).startswith("pipe:")
        kept.replace({"MODE": "niced"})
        assert kept.process is spare and kept.standby is None  # none while niced
        _wait(lambda: _stdin(spare) == os.devnull)  # told to work, it let go of stdin
        _wait(lambda: first.poll() is not None)
        kept.replace({"MODE": "idle"})
        third, second_spare = kept.process, kept.standby
        assert third not in (first, spare) and second_spare is not None
        assert second_spare is not spare
    finally:
        kept.stop(timeout_s=5)
    assert all(p is not None and p.poll() is not None for p in (spare, third, second_spare))


def test_a_spare_whose_supervisor_closes_its_stdin_never_works() -> None:
    spare = subprocess.run(
        [sys.executable, "-c", SPARE, STANDBY_FLAG],
        input=b"",  # closed without a word: serve stopped, or died
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert spare.returncode == 0 and spare.stdout == b"", spare.stderr

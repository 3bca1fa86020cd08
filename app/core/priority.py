"""The CPU priority of a background process: every one of its threads, not only the caller.

On Linux a thread's niceness and scheduling policy are its own; a thread inherits the
creating thread's when it starts. Libraries start threads at import (numpy's OpenBLAS
starts its pool when numpy is imported), so lowering only the calling thread, after the
imports, left the embedding model's second BLAS thread at niceness 0, beside the API.
``lower_process`` lowers every thread that exists, and the caller, so threads started
later inherit it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def threads(pid: int | str = "self") -> list[int]:
    """The ids of ``pid``'s threads (Linux's /proc; empty elsewhere)."""
    with contextlib.suppress(OSError):
        return sorted(int(t.name) for t in Path(f"/proc/{pid}/task").iterdir())
    return []


def lower_thread(tid: int, niceness: int, *, idle: bool) -> None:
    """Lower one thread's priority: ``niceness`` (never raised), and with ``idle`` the
    SCHED_IDLE policy (it runs only when no normal thread wants the CPU). A thread that
    ended meanwhile, or a platform without these calls, is skipped."""
    with contextlib.suppress(OSError, AttributeError):
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if niceness > current:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        if idle:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))


def lower_process(niceness: int, *, idle: bool) -> None:
    """``lower_thread`` for every thread of this process, the calling one included."""
    for tid in threads() or [0]:
        lower_thread(tid, niceness, idle=idle)

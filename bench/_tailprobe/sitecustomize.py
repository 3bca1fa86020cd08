"""``bench.tail``'s probe, loaded into the served processes only (``PYTHONPATH``).

Never imported by the app. In the API process it times each request's phases on the
monotonic clock shared by every process of the machine (``time.perf_counter``):
bytes arrived (uvicorn's ``data_received``), the ASGI app entered (the gap is the
wait in the event loop's queue), the pool checkout, each statement of the context
read, the memory block, the packing and JSON, the response handed to the transport.
It also records the garbage collector's passes, the event loop's lag (a timer's late
wake-ups) and, in the job worker, every job's start, end and CPU. Everything goes to
``$TAIL_PROBE_DIR/<role>-<pid>.jsonl``, written at exit.
"""

from __future__ import annotations

import os

_DIR = os.environ.get("TAIL_PROBE_DIR")


def _role() -> str | None:
    try:
        argv = open("/proc/self/cmdline", "rb").read().split(b"\0")
    except OSError:
        return None
    if b"app.cli" not in argv:
        return None
    if b"serve" in argv:
        return "api"
    if b"worker" in argv:
        return "worker"
    return None


if _DIR:
    _ROLE = _role()
    if _ROLE is not None:
        from bench._tailprobe import install

        install.run(_ROLE, _DIR)

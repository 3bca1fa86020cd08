"""Every process's CPU on this machine, sampled (``bench.tail``): ``python -m
bench._tailprobe.sampler OUT PERIOD_S`` writes one JSON line per sample: the time
(``perf_counter``), and per pid that used CPU since the last one, its ticks and name."""

from __future__ import annotations

import json
import os
import sys
import time


def snapshot() -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        head, _, rest = raw.rpartition(b")")
        fields = rest.split()
        comm = head.split(b"(", 1)[1].decode(errors="replace")
        out[int(name)] = (comm, int(fields[11]) + int(fields[12]))
    return out


def main() -> None:
    path, period = sys.argv[1], float(sys.argv[2])
    before = snapshot()
    with open(path, "a") as f:
        while True:
            time.sleep(period)
            at, now = time.perf_counter(), snapshot()
            used = {
                pid: [comm, ticks - before.get(pid, (comm, 0))[1]]
                for pid, (comm, ticks) in now.items()
                if ticks - before.get(pid, (comm, 0))[1] > 0
            }
            f.write(json.dumps({"at": at, "used": used}) + "\n")
            f.flush()
            before = now


if __name__ == "__main__":
    main()

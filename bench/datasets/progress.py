"""A tiny progress bar on stderr (no dependency): ``[#####.....] 45/128 sessions 3.1/s 12s left``.

On a terminal it redraws one line at most 5 times a second; otherwise (a log
file, CI) it prints a plain line at every 10 %.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 24


class Progress:
    def __init__(self, total: int, label: str, *, stream: TextIO | None = None) -> None:
        self.total = max(0, total)
        self.label = label
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._tty = self._stream.isatty()
        self._began = time.monotonic()
        self._drawn = 0.0
        self._decile = -1

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        now = time.monotonic()
        if self._tty:
            if now - self._drawn >= 0.2 or self.done == self.total:
                self._drawn = now
                self._stream.write("\r" + self.line(now))
                self._stream.flush()
        else:
            decile = self.done * 10 // self.total if self.total else 10
            if decile != self._decile:
                self._decile = decile
                self._stream.write(self.line(now) + "\n")
                self._stream.flush()

    def line(self, now: float | None = None) -> str:
        elapsed = (now if now is not None else time.monotonic()) - self._began
        share = self.done / self.total if self.total else 1.0
        filled = round(share * WIDTH)
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        return (
            f"[{'#' * filled}{'.' * (WIDTH - filled)}] {self.done}/{self.total} {self.label}"
            f" {rate:.1f}/s {left:.0f}s left"
        )

    def close(self) -> None:
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()

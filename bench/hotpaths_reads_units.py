"""The live-notes part of a context read, its units read on the read path or stored.

    python -m bench.hotpaths_reads_units [--reads N] [--out FILE.json]

In-process, no server: the sessions ``bench.latency`` generates (seed 7, 200 × 110
messages, the newest 70 live: about 17 live user turns each), read in random order as
the context read reads them (``live_notes.any_carrier``, then ``notes_for`` with every
live user turn but the newest three left out, when one carries a unit). Two ways, each
in a fresh process state (caches emptied), twice, alternating:

- ``unread``: the turns as before the worker stored anything (``LiveTurn.units`` None):
  the read runs the rule extractor over them (per-process cache of 4,096 texts);
- ``stored``: each user turn carries its record (``live_notes.units_record``, what the
  worker stores when it indexes the turn or a compression leaves it live).

Prints the CPU per read of each and checks that both give the same notes, read by
read. The work the worker does instead (one extraction per turn, once) is not in the
figure: it is done once per turn, not once per read.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.compression import live_notes
from app.compression.live import LiveTurn
from app.compression.render import render
from app.compression.state import Goal, TaskState
from bench._results import write_result
from bench.latency import session_messages

SESSIONS, MESSAGES, LIVE = 200, 110, 70
WINDOW = 3  # newest user turns the context holds


def sessions(stored: bool) -> list[list[LiveTurn]]:
    rng = random.Random(7)
    out = []
    for i in range(SESSIONS):
        messages = session_messages(rng, f"bench-s{i:05d}", MESSAGES)
        live = []
        for seq, m in enumerate(messages, 1):
            if seq <= MESSAGES - LIVE:
                continue
            content = m.get("content")
            user = m["role"] == "user" and bool(content)
            record = live_notes.units_record(content or "") if stored and user else None
            live.append(LiveTurn(seq, m["role"], content, record))
        out.append(live)
    return out


def read_all(live: list[list[LiveTurn]], rendered: str, reads: int) -> tuple[float, list[Any]]:
    """CPU seconds per read, and each read's notes."""
    for cached in (live_notes.turn_units, live_notes._recorded):
        cached.cache_clear()
    live_notes._LIVE_STATES.clear()
    order = random.Random(1)
    notes: list[Any] = []
    began = time.process_time()
    for _ in range(reads):
        turns = live[order.randrange(len(live))]
        if not live_notes.any_carrier(turns):
            notes.append(None)
            continue
        users = [t.seq for t in turns if t.role == "user"]
        notes.append(live_notes.notes_for(rendered, turns, set(users[:-WINDOW])))
    return (time.process_time() - began) / reads, notes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hotpaths_reads_units",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rendered = render(TaskState(goal=Goal(key="goal", text="Plan the trip"), last_seq=40))
    # The records are made before the clock starts: the worker's work, not the read's.
    live = {"unread": sessions(stored=False), "stored": sessions(stored=True)}
    per_read: dict[str, list[float]] = {"unread": [], "stored": []}
    seen: dict[str, list[Any]] = {}
    for way in ("unread", "stored", "unread", "stored"):
        cpu, notes = read_all(live[way], rendered, args.reads)
        per_read[way].append(round(cpu * 1000, 4))
        seen.setdefault(way, notes)
    same = seen["unread"] == seen["stored"]
    carrying = sum(1 for n in seen["unread"] if n is not None)
    added = sum(len(n) for n in seen["unread"] if n)
    result = {
        "reads": args.reads,
        "reads_running_notes_for": carrying,
        "note_lines_added": added,
        "cpu_ms_per_read": per_read,
        "same_notes": same,
    }
    for way, ms in per_read.items():
        print(f"{way:>7}: {' / '.join(f'{m:.3f}' for m in ms)} ms of CPU per read")
    print(
        f"{carrying} of {args.reads} reads had a live turn stating a unit (notes_for ran),"
        f" {added} note lines;"
        f" same notes read by read: {same}"
    )
    write_result(args.out, result)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

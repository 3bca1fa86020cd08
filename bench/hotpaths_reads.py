"""How often an agent reads its context between two user turns (issue 13).

    python -m bench.hotpaths_reads [--out FILE.json]

Counts, in the agent traces of ``../shared/data`` (tau-bench airline gpt-4o
trajectories, the agent-sessions corpus), the context reads an agent makes: one
before each assistant turn (each LLM call), as a tool-using agent reads Mnemo. Per
read, how many reads of the same user turn came before it.

Why it matters: a context's long-term memory block, when no explicit ``query`` is
given, is a function of the session's latest user turn, the user's memories and the
budget, so it could be cached between the reads of one user turn. But the worker
indexes every user turn (``index_session``: the turn's episodes join the user's
memories, and the turn's embedding becomes the query vector), so the first read after
a user turn (lexical query, before the worker ran) and the second (query vector, one
more set of memories) differ; only the third and later reads of a user turn could be
answered from such a cache. This prints that share: an upper bound of its hit rate
(a compression or a promotion in between lowers it further).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench._replay import shared_data
from bench._results import write_result


def reads_per_user_turn(sessions: Iterable[Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Reads (one per assistant turn), user turns, and reads by their rank after the
    latest user turn (1 = the first read after it)."""
    reads = users = 0
    by_rank: dict[int, int] = {}
    for messages in sessions:
        rank = 0
        for m in messages:
            if m["role"] == "user":
                users += 1
                rank = 0
            elif m["role"] == "assistant":
                reads += 1
                rank += 1
                by_rank[rank] = by_rank.get(rank, 0) + 1
    later = sum(n for r, n in by_rank.items() if r >= 3)
    return {
        "reads": reads,
        "user_turns": users,
        "reads_per_user_turn": round(reads / users, 3) if users else None,
        "first_reads": by_rank.get(1, 0),
        "second_reads": by_rank.get(2, 0),
        "third_or_later_reads": later,
        "cache_hit_upper_bound": round(later / reads, 3) if reads else None,
    }


def corpora() -> dict[str, list[list[dict[str, Any]]]]:
    tau = json.loads(shared_data("tau", "airline_dev.json").read_text())
    sessions = json.loads(shared_data("agent-sessions", "dev.json").read_text())
    return {
        "tau_airline_dev": [t["traj"] for t in tau],
        "agent_sessions_dev": [s["messages"] for s in sessions],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hotpaths_reads", description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = {name: reads_per_user_turn(s) for name, s in corpora().items()}
    for name, r in result.items():
        print(
            f"{name}: {r['reads']} reads, {r['user_turns']} user turns"
            f" ({r['reads_per_user_turn']} reads per user turn); first {r['first_reads']},"
            f" second {r['second_reads']}, third or later {r['third_or_later_reads']}"
            f" -> at most {r['cache_hit_upper_bound']:.1%} of reads could reuse a memory block"
        )
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

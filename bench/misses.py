"""Misses under aggressive compression: how many planted items compression loses, how
many a miss brings back in full.

    python -m bench.misses [--sessions 40 --min-turns 60 --max-turns 300 --seed 7
                            --budget 300 --every 10]

In-process (the pure core, no server): the ``bench.recall`` sessions (English and
Chinese, with their ground truth) are compressed aggressively — every ``--every``
turns all but the working window, the state rendered into ``--budget`` tokens — and
at the end each planted item is looked for in the rendered state and the working
window, as ``bench.recall`` judges it (all its phrases present). An item that is not
there is a miss. The agent signals it with what it still knows about the item: the
setting's name for a parameter, otherwise the planted sentence with the item's
identifying phrases taken out (never the phrases themselves, which would make
finding the turn trivial). The miss is **fully restored** when the pinned facts the
restore adds to the state (``app.compression.restore``, as ``POST …/misses`` does;
each clipped to its length limit) contain every phrase.

Re-ask detection is counted too: assistant questions in the sessions that a compacted
user turn answers (``reasks``), and how many of them are real (the restored turn
holds a planted item's phrase).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from typing import Any

from app.compression.extract.rules import RuleExtractor
from app.compression.merge import merge
from app.compression.render import render
from app.compression.restore import reasks, relevant, restore
from app.compression.state import TaskState
from app.core.turns import TurnView
from app.memories.bm25 import index_terms
from bench.sessions import Planted, Session, generate, plan_sessions

WINDOW = 3


def _views(session: Session) -> list[TurnView]:
    return [
        TurnView(
            seq=i + 1,
            role=m["role"],
            content=m.get("content"),
            tool_calls=m.get("tool_calls"),
            tool_call_id=m.get("tool_call_id"),
            emphasized=bool(m.get("emphasized")),
        )
        for i, m in enumerate(session.messages)
    ]


def _needed(item: Planted) -> str:
    """What the agent still knows about a lost item (never its identifying phrases)."""
    if item.kind.startswith("parameter") and item.name:
        return item.name
    text = item.text
    for phrase in (*item.phrases, item.value, *item.old_values):
        if phrase:
            text = text.replace(phrase, " ")
    return text


def _present(item: Planted, text: str) -> bool:
    phrases = [p for p in item.phrases if p] or [item.value or item.text]
    return all(p.casefold() in text.casefold() for p in phrases)


async def _run_session(session: Session, *, budget: int, every: int) -> Counter[str]:
    views = _views(session)
    extractor = RuleExtractor()
    state = TaskState()
    compacted: list[TurnView] = []
    counts: Counter[str] = Counter()
    done = 0
    for end in range(every, len(views) + 1, every):
        chunk = views[done : max(done, end - WINDOW)]
        if not chunk:
            continue
        counts["reask_detected"] += sum(
            1
            for r in reasks(chunk, compacted, index_terms)
            if any(_present(p, " ".join(f.text for f in r.fragments)) for p in session.planted)
        )
        counts["reask_all"] += len(reasks(chunk, compacted, index_terms))
        units = await extractor.extract(chunk, state)
        state = merge(state, units, through_seq=chunk[-1].seq, language=session.language)
        compacted += chunk
        done += len(chunk)
    rendered = render(state, language=session.language, max_tokens=budget)
    window = " ".join(str(v.content or "") for v in views[done:])
    for item in session.planted:
        counts["planted"] += 1
        if _present(item, rendered) or _present(item, window):
            continue
        counts["missed"] += 1
        fragments = relevant(_needed(item), compacted, index_terms)
        if fragments:
            counts["restored_some"] += 1
        pinned = restore(TaskState(), fragments, session.language).high_stakes
        if _present(item, " ".join(h.text for h in pinned)):
            counts["fully_restored"] += 1
            counts[f"fully_restored:{item.kind}"] += 1
        counts[f"missed:{item.kind}"] += 1
    return counts


async def run(args: argparse.Namespace) -> dict[str, Any]:
    totals: Counter[str] = Counter()
    plan = plan_sessions(
        seed=args.seed, count=args.sessions, min_turns=args.min_turns, max_turns=args.max_turns
    )
    for index, turns, language in plan:
        session = generate(seed=args.seed, index=index, turns=turns, language=language)
        totals += await _run_session(session, budget=args.budget, every=args.every)
    kinds = sorted({k.split(":", 1)[1] for k in totals if k.startswith("missed:")})
    return {
        "sessions": len(plan),
        "budget_tokens": args.budget,
        "planted": totals["planted"],
        "missed": totals["missed"],
        "misses_with_a_restored_turn": totals["restored_some"],
        "fully_restored": totals["fully_restored"],
        "by_kind": {
            k: {"missed": totals[f"missed:{k}"], "fully_restored": totals[f"fully_restored:{k}"]}
            for k in kinds
        },
        "reasks_detected": totals["reask_all"],
        "reasks_restoring_a_planted_item": totals["reask_detected"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--min-turns", type=int, default=60)
    parser.add_argument("--max-turns", type=int, default=300)
    parser.add_argument("--seed", default="7")
    parser.add_argument("--budget", type=int, default=300, help="tokens for the rendered state")
    parser.add_argument("--every", type=int, default=10, help="compress every N turns")
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()

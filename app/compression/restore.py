"""Misses: what compression took away that the agent turned out to need. Pure.

A miss is signalled (``POST …/misses`` with what was needed) or detected: the agent
asks the user for something a compacted turn already answers. Either way the
archived turns that hold it are found by their words (the caller passes the term
function: the BM25 postings' stemmed terms, CJK as bigrams), and come back into the state as
pinned facts that name the turn they came from, so the next contexts carry them
and no later compression drops them again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.compression.state import HighStakes, TaskState
from app.compression.text import clip
from app.core.turns import TurnView

Terms = Callable[[str], Iterable[str]]

# At most this many archived turns come back for one miss.
MAX_FRAGMENTS = 3
# A turn is relevant when it holds this share of the request's terms. A question the
# agent asked must share at least REASK_TERMS with the user's turn: "Anything else?"
# is no re-ask of every turn that says "else".
MIN_SHARE = 0.5
REASK_TERMS = 2
FRAGMENT_CHARS = 400
_QUESTION_END = ("?", "？")
_PROVENANCE = {"en": "(restored from turn {seq})", "zh": "（恢复自第 {seq} 轮）"}


@dataclass(frozen=True)
class Fragment:
    seq: int
    role: str
    text: str
    score: float


def turn_text(turn: TurnView) -> str:
    """What a turn said, tool calls included (name and arguments)."""
    parts = [turn.content or ""]
    for call in turn.tool_calls or ():
        function = call.get("function") or {}
        parts.append(f"{function.get('name', '')}({function.get('arguments', '')})")
    return " ".join(p for p in parts if p).strip()


def relevant(
    needed: str,
    archived: Sequence[TurnView],
    terms: Terms,
    *,
    roles: Sequence[str] | None = None,
    min_terms: int = 1,
) -> list[Fragment]:
    """The archived turns that hold what ``needed`` asks for, best first."""
    wanted = set(terms(needed))
    if len(wanted) < min_terms:
        return []
    floor = max(min_terms, MIN_SHARE * len(wanted))
    found = []
    for turn in archived:
        if roles is not None and turn.role not in roles:
            continue
        text = turn_text(turn)
        shared = wanted & set(terms(text))
        if len(shared) >= floor:
            found.append(Fragment(turn.seq, turn.role, text, len(shared) / len(wanted)))
    # Best match first; among equals the newest (a later statement supersedes).
    found.sort(key=lambda f: (-f.score, -f.seq))
    return [_with_pair(f, archived) for f in found[:MAX_FRAGMENTS]]


def _with_pair(fragment: Fragment, archived: Sequence[TurnView]) -> Fragment:
    """A tool call comes back with its results, a result with its call: one without
    the other says neither what was done nor what came of it."""
    by_seq = {t.seq: t for t in archived}
    turn = by_seq[fragment.seq]
    if turn.tool_calls:
        ids = {c.get("id") for c in turn.tool_calls}
        pair = [t for t in archived if t.role == "tool" and t.tool_call_id in ids]
        return _joined(fragment, [turn, *pair])
    if turn.role == "tool":
        call = next(
            (
                t
                for t in reversed(archived)
                if t.seq < turn.seq
                and any(c.get("id") == turn.tool_call_id for c in t.tool_calls or ())
            ),
            None,
        )
        if call is not None:
            return _joined(fragment, [call, turn])
    return fragment


def _joined(fragment: Fragment, turns: Sequence[TurnView]) -> Fragment:
    text = " → ".join(turn_text(t) for t in turns)
    return Fragment(fragment.seq, fragment.role, text, fragment.score)


def restore(state: TaskState, fragments: Sequence[Fragment], language: str | None) -> TaskState:
    """The state with ``fragments`` pinned, each naming its turn (once per turn)."""
    new = state.model_copy(deep=True)
    have = {h.key for h in new.high_stakes}
    mark = _PROVENANCE.get(language or new.language or "en", _PROVENANCE["en"])
    for f in sorted(fragments, key=lambda f: f.seq):
        key = f"restored:{f.seq}"
        if key in have:
            continue
        text = f"{f.role}: {clip(f.text, FRAGMENT_CHARS)} {mark.format(seq=f.seq)}"
        new.high_stakes.append(
            HighStakes(key=key, text=text, source_seqs=[f.seq], emphasized=True, category="other")
        )
    return new


def is_question(turn: TurnView) -> bool:
    return turn.role == "assistant" and (turn.content or "").rstrip().endswith(_QUESTION_END)


@dataclass(frozen=True)
class Reask:
    question: TurnView
    fragments: list[Fragment]


def reasks(new: Sequence[TurnView], archived: Sequence[TurnView], terms: Terms) -> list[Reask]:
    """Questions the agent asked in ``new`` that a compacted user turn already answered."""
    out = []
    for turn in new:
        if not is_question(turn):
            continue
        earlier = [t for t in archived if t.seq < turn.seq]
        fragments = relevant(
            turn.content or "", earlier, terms, roles=("user",), min_terms=REASK_TERMS
        )
        if fragments:
            out.append(Reask(turn, fragments))
    return out


def sample_turns(
    archived: Sequence[TurnView], seqs: Sequence[int], around: int = 2
) -> list[dict[str, Any]]:
    """The compacted turns kept with a miss: the restored ones and their neighbours."""
    near = {s + d for s in seqs for d in range(-around, around + 1)}
    return [
        {
            "seq": t.seq,
            "role": t.role,
            "content": t.content,
            "tool_calls": json.loads(json.dumps(t.tool_calls)) if t.tool_calls else None,
            "tool_call_id": t.tool_call_id,
        }
        for t in archived
        if t.seq in near
    ]

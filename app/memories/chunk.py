"""Episodic chunking: a session's turns cut into topic-coherent, overlapping passages.

One chunk per turn would make "ok" and "yes please" retrievable episodes and
cut every answer from its question; one chunk per session would drown a
detail. So turns accumulate until ``max_chars``, and a chunk closes earlier
(once it holds ``min_chars``) where the topic shifts.

Invariants (tested, including by Hypothesis):

* every turn with text appears in some chunk; seqs inside a chunk ascend;
* an assistant tool call and its tool results are one block: a chunk holding
  any of them holds all of them, even past ``max_chars`` (long tool outputs
  are clipped in the text instead);
* each chunk after the first starts with ~``overlap`` of the previous chunk's
  text (whole tail blocks, or the clipped tail of one; between 2/3·overlap and
  overlap + 5 points, i.e. 10–20 % for 0.15), so a fact near a boundary is
  retrievable from both sides; ``overlap_chars`` says how much.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.memories.lexical import lexical_terms

ELLIPSIS = "…"
# Below these, consecutive blocks are on different topics. The similarity one
# is calibrated for USE cosine (unrelated sentences ≈ 0.1–0.3, related ≥ 0.4);
# the lexical one is an overlap coefficient of terms.
SIMILARITY_SHIFT = 0.3
LEXICAL_SHIFT = 0.1
# Turns with fewer terms than this ("ok", "yes please") say nothing about topic.
_MIN_TOPIC_TERMS = 3
_TOPIC_WINDOW_BLOCKS = 2


class TurnLike(Protocol):
    """What chunking reads from a turn; ``TurnView`` and ``ChunkTurn`` both fit."""

    @property
    def seq(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str | None: ...
    @property
    def tool_call_id(self) -> str | None: ...
    @property
    def tool_calls(self) -> list[dict[str, Any]] | None: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class ChunkTurn:
    seq: int
    role: str
    content: str | None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Chunk:
    text: str
    seqs: list[int]
    dataset_ids: list[str]
    overlap_chars: int = 0  # leading characters of ``text`` carried from the previous chunk


@dataclass(frozen=True)
class _Block:
    """Turns that must stay together: one turn, or a tool call with its results."""

    lines: tuple[str, ...]
    seqs: tuple[int, ...]
    dataset_ids: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def content(self) -> str:
        """The text without role prefixes, which would make every turn look alike."""
        return "\n".join(line.partition(": ")[2] for line in self.lines)


# --------------------------------------------------------------------------- blocks


def _call_line(call: Mapping[str, Any], limit: int) -> str:
    function = call.get("function") or {}
    name = function.get("name") or call.get("name") or "tool"
    arguments = function.get("arguments", call.get("arguments", ""))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return f"assistant: → {name}({_clip(arguments, limit)})"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + ELLIPSIS


def speaker_of(turn: TurnLike) -> str:
    """Who said it, by name when the client gave one: "what did Ana say about …" is a
    common question, and the name is a term lexical search can match."""
    return str(getattr(turn, "name", None) or (turn.metadata or {}).get("speaker") or turn.role)


def _turn_lines(turn: TurnLike, tool_chars: int) -> list[str]:
    content = " ".join((turn.content or "").split())
    if turn.role == "tool":
        return [f"tool: {_clip(content, tool_chars)}"] if content else []
    speaker = speaker_of(turn)
    lines = [f"{speaker}: {content}"] if content else []
    lines.extend(_call_line(call, tool_chars) for call in turn.tool_calls or [])
    return lines


def _dataset_id(turn: TurnLike) -> str | None:
    value = (turn.metadata or {}).get("dataset_id")
    return str(value) if value is not None else None


def _blocks(turns: Sequence[TurnLike], tool_chars: int) -> list[_Block]:
    ordered = sorted(turns, key=lambda t: t.seq)
    blocks: list[_Block] = []
    i = 0
    while i < len(ordered):
        group = [ordered[i]]
        call_ids = {c.get("id") for c in ordered[i].tool_calls or []}
        i += 1
        if call_ids:
            # Results follow their call; anything answering one of its ids joins.
            while i < len(ordered) and ordered[i].role == "tool":
                if ordered[i].tool_call_id not in call_ids and None not in call_ids:
                    break
                group.append(ordered[i])
                i += 1
        lines = [line for turn in group for line in _turn_lines(turn, tool_chars)]
        if not lines:
            continue  # nothing to retrieve (empty content, no calls)
        ids = [d for d in map(_dataset_id, group) if d is not None]
        blocks.append(_Block(tuple(lines), tuple(t.seq for t in group), tuple(ids)))
    return blocks


# --------------------------------------------------------------------------- topic


def _lexical_shift(window: str, text: str) -> bool:
    a, b = set(lexical_terms(window)), set(lexical_terms(text))
    if len(a) < _MIN_TOPIC_TERMS or len(b) < _MIN_TOPIC_TERMS:
        return False
    return len(a & b) / min(len(a), len(b)) < LEXICAL_SHIFT


def _is_shift(
    current: Sequence[_Block],
    block: _Block,
    similarity: Callable[[str, str], float] | None,
    threshold: float | None,
) -> bool:
    window = "\n".join(b.content for b in current[-_TOPIC_WINDOW_BLOCKS:])
    if similarity is None:
        return _lexical_shift(window, block.content)
    limit = SIMILARITY_SHIFT if threshold is None else threshold
    return similarity(window, block.content) < limit


# --------------------------------------------------------------------------- overlap


def _tail_block(block: _Block, chars: int) -> _Block:
    """About the last ``chars`` characters of ``block``, each line keeping its role prefix."""
    kept: list[str] = []
    for line in reversed(block.lines):
        if len(line) <= chars:
            kept.insert(0, line)
            chars -= len(line) + 1
            continue
        if chars > 0:
            role, _, content = line.partition(": ")
            kept.insert(0, f"{role}: {ELLIPSIS}{content[-chars:]}")
        break
    # Seqs stay whole: a clipped tool group still traces to its call and results.
    return _Block(tuple(kept), block.seqs, block.dataset_ids)


def _carry(previous: Sequence[_Block], overlap: float) -> list[_Block]:
    """The tail of a closed chunk that opens the next one (~``overlap`` of its text)."""
    if overlap <= 0:
        return []
    total = len("\n".join(b.text for b in previous))
    target, ceiling = overlap * total, (overlap + 0.05) * total
    carried: list[_Block] = []
    size = 0
    for block in reversed(previous):
        cost = len(block.text) + (1 if carried else 0)
        if size + cost > ceiling:
            tail = _tail_block(block, round(target - size))
            if size < target * 0.67 and tail.lines:
                carried.insert(0, tail)
            break
        carried.insert(0, block)
        size += cost
        if size >= target:
            break
    return carried


# --------------------------------------------------------------------------- chunks


def _chunk(blocks: Sequence[_Block], carried: int) -> Chunk:
    seqs = sorted({s for b in blocks for s in b.seqs})
    ids = list(dict.fromkeys(d for b in blocks for d in b.dataset_ids))
    text = "\n".join(b.text for b in blocks)
    overlap_chars = len("\n".join(b.text for b in blocks[:carried])) if carried else 0
    return Chunk(text=text, seqs=seqs, dataset_ids=ids, overlap_chars=overlap_chars)


def chunk_turns(
    turns: Sequence[TurnLike],
    *,
    min_chars: int = 200,
    max_chars: int = 500,
    overlap: float = 0.15,
    similarity: Callable[[str, str], float] | None = None,
    shift_threshold: float | None = None,
    tool_chars: int = 200,
) -> list[Chunk]:
    """Cut ``turns`` (any order; sorted by seq) into chunks; see the module invariants.

    ``similarity`` (e.g. cosine of precomputed USE vectors) detects topic shifts
    below ``shift_threshold``; without it, term overlap does.
    """
    chunks: list[Chunk] = []
    current: list[_Block] = []
    carried = 0  # how many leading blocks of ``current`` are overlap
    for block in _blocks(turns, tool_chars):
        own = current[carried:]
        size = len("\n".join(b.text for b in current))
        overflow = bool(own) and size + 1 + len(block.text) > max_chars
        shift = (
            bool(own) and size >= min_chars and _is_shift(own, block, similarity, shift_threshold)
        )
        if overflow or shift:
            chunks.append(_chunk(current, carried))
            current = _carry(current, overlap)
            carried = len(current)
        current.append(block)
    if current[carried:]:
        chunks.append(_chunk(current, carried))
    return chunks

"""Assemble a prompt within a token budget. Pure: no I/O.

Order: one system message with the blocks that describe the session (task
state, long-term memories, summary), then the most recent raw turns that fit.
Invariants:
- the total never exceeds ``max_tokens``;
- an assistant message with tool calls and its tool results go in together or
  not at all, and no tool result appears without its call;
- the newest turns win: packing walks back from the end and stops at the first
  group that does not fit, so the recent window has no holes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.tokens import MESSAGE_OVERHEAD_TOKENS, truncate_to_tokens

Message = dict[str, Any]

TRUNCATION_MARK = " …[truncated]"


@dataclass(frozen=True)
class Block:
    kind: str
    text: str


@dataclass(frozen=True)
class RecentTurn:
    message: Message
    tokens: int


@dataclass
class Packed:
    messages: list[Message]
    blocks: list[tuple[str, int]]
    tokens: int
    dropped_turns: int = 0
    notes: list[str] = field(default_factory=list)


def group_turns(turns: Sequence[RecentTurn]) -> list[list[RecentTurn]]:
    """Split turns, oldest first, into units that must not be separated."""
    groups: list[list[RecentTurn]] = []
    open_calls: set[str] = set()
    for turn in turns:
        m = turn.message
        if m["role"] == "tool" and groups and m.get("tool_call_id") in open_calls:
            groups[-1].append(turn)
            continue
        if m["role"] == "tool":
            # A result whose call is not in view (compacted or never posted):
            # alone it would be rejected by chat APIs, so it forms an orphan group.
            groups.append([turn])
            open_calls = set()
            continue
        groups.append([turn])
        open_calls = {c["id"] for c in m.get("tool_calls") or ()}
    return groups


def _is_orphan(group: Sequence[RecentTurn]) -> bool:
    return group[0].message["role"] == "tool"


def pack(
    *,
    blocks: Sequence[Block],
    recent: Sequence[RecentTurn],
    max_tokens: int,
    count: Callable[[str], int],
) -> Packed:
    """Blocks first (each trimmed if it alone is too big), then recent turns, newest first."""
    system_parts: list[str] = []
    block_sizes: list[tuple[str, int]] = []
    budget = max_tokens - MESSAGE_OVERHEAD_TOKENS
    used = 0
    for block in blocks:
        if not block.text:
            continue
        piece = block.text if not system_parts else "\n\n" + block.text
        size = count(piece)
        if used + size > budget:
            piece = truncate_to_tokens(piece, budget - used - count(TRUNCATION_MARK))
            if not piece.strip():
                continue
            piece += TRUNCATION_MARK
            size = count(piece)
        system_parts.append(piece)
        block_sizes.append((block.kind, size))
        used += size

    system_text = "".join(system_parts)
    # Counted again as one string: BPE over a concatenation can differ from the sum.
    total = MESSAGE_OVERHEAD_TOKENS + count(system_text) if system_parts else 0
    if total > max_tokens:
        system_text = truncate_to_tokens(system_text, budget - count(TRUNCATION_MARK) - 1)
        system_text += TRUNCATION_MARK
        total = MESSAGE_OVERHEAD_TOKENS + count(system_text)
    chosen: list[list[RecentTurn]] = []
    groups = group_turns(recent)
    dropped = 0
    for index in range(len(groups) - 1, -1, -1):
        group = groups[index]
        if _is_orphan(group):
            dropped += len(group)
            continue
        cost = sum(t.tokens for t in group)
        if total + cost <= max_tokens:
            chosen.append(group)
            total += cost
            continue
        if not chosen:
            trimmed = _trim_single(group, max_tokens - total, count)
            if trimmed is not None:
                chosen.append([trimmed])
                total += trimmed.tokens
        dropped += sum(len(g) for g in groups[: index + 1])
        break

    messages: list[Message] = []
    if system_parts:
        messages.append({"role": "system", "content": system_text})
    recent_tokens = 0
    for group in reversed(chosen):
        for turn in group:
            messages.append(turn.message)
            recent_tokens += turn.tokens
    if recent_tokens:
        block_sizes.append(("recent", recent_tokens))
    return Packed(messages=messages, blocks=block_sizes, tokens=total, dropped_turns=dropped)


def _trim_single(
    group: Sequence[RecentTurn], room: int, count: Callable[[str], int]
) -> RecentTurn | None:
    """The newest turn alone is over budget: keep a prefix of a plain text message.

    A tool-call group is never cut (half a call is worse than none).
    """
    if len(group) != 1 or group[0].message.get("tool_calls"):
        return None
    message = group[0].message
    content = message.get("content") or ""
    room_for_text = room - MESSAGE_OVERHEAD_TOKENS - count(TRUNCATION_MARK)
    if room_for_text < 16:
        return None
    text = truncate_to_tokens(content, room_for_text) + TRUNCATION_MARK
    trimmed = {**message, "content": text}
    return RecentTurn(message=trimmed, tokens=MESSAGE_OVERHEAD_TOKENS + count(text))


def as_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The context as one string: a header per message, tool calls spelled out."""
    parts = []
    for m in messages:
        head = m["role"] if not m.get("name") else f"{m['role']} ({m['name']})"
        lines = [m["content"]] if m.get("content") else []
        for call in m.get("tool_calls") or ():
            fn = call.get("function", {})
            lines.append(f"→ {fn.get('name')}({fn.get('arguments')}) [{call.get('id')}]")
        if m.get("tool_call_id"):
            head += f" [{m['tool_call_id']}]"
        parts.append(f"{head}: " + "\n".join(lines))
    return "\n\n".join(parts)

"""Assemble a prompt within a token budget. Pure: no I/O.

Order: one system message with the blocks that describe the session (task
state, long-term memories, summary), then the most recent raw turns that fit.
Invariants:
- the total never exceeds ``max_tokens``;
- an assistant message with tool calls and its tool results go in together or
  not at all, and no tool result appears without its call;
- the newest turns win: packing walks back from the end and stops at the first
  group that does not fit, so the recent window has no holes; that group is
  placed with its contents cut when it is the newest one or a tool call (the
  call whole, its results cut), if enough room is left for that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from app.core.tokens import MESSAGE_OVERHEAD_TOKENS, count_message_tokens, truncate_to_tokens

Message = dict[str, Any]

TRUNCATION_MARK = " …[truncated]"


@dataclass(frozen=True)
class Block:
    kind: str
    text: str
    # Smaller renderings of the same block, largest first (e.g. task-state tiers):
    # ``choose_tier`` takes the largest that fits its room.
    tiers: tuple[str, ...] = ()


class RecentTurn(NamedTuple):
    # A tuple, not a frozen dataclass: a read makes one for each of up to 64 live turns,
    # and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` a field) cost
    # four times a tuple's (0.6 against 0.15 us).
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
    return Groups.of(turns).groups


def _is_call(group: Sequence[RecentTurn]) -> bool:
    return bool(group[0].message.get("tool_calls"))


@dataclass(frozen=True)
class Groups:
    """``group_turns(recent)`` with what each group costs and where it starts in
    ``recent``: worked out once for a read that packs the same turns more than once."""

    groups: list[list[RecentTurn]]
    costs: list[int]
    starts: list[int]
    orphan: list[bool]

    @classmethod
    def of(cls, recent: Sequence[RecentTurn]) -> Groups:
        """One walk over ``recent``, oldest first: a tool result joins the group of the
        call it answers; one whose call is not in view (compacted or never posted) is
        an orphan group of its own, since alone it would be rejected by chat APIs."""
        groups: list[list[RecentTurn]] = []
        costs: list[int] = []
        starts: list[int] = []
        orphan: list[bool] = []
        open_calls: set[str] = set()
        for at, turn in enumerate(recent):
            m = turn.message
            tool = m["role"] == "tool"
            if tool and open_calls and m.get("tool_call_id") in open_calls:
                groups[-1].append(turn)
                costs[-1] += turn.tokens
                continue
            groups.append([turn])
            costs.append(turn.tokens)
            starts.append(at)
            orphan.append(tool)
            calls = None if tool else m.get("tool_calls")
            open_calls = {c["id"] for c in calls} if calls else set()
        return cls(groups=groups, costs=costs, starts=starts, orphan=orphan)


@dataclass(frozen=True)
class System:
    """The system message the blocks make: its text, each block's size, and the
    tokens it costs with its framing (0 without blocks)."""

    text: str
    blocks: list[tuple[str, int]]
    tokens: int


def system_message(blocks: Sequence[Block], max_tokens: int, count: Callable[[str], int]) -> System:
    """The blocks in one system message, in order, each trimmed if it alone is too big."""
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
    return System(system_text, block_sizes, total)


def _walk(groups: Groups, total: int, max_tokens: int) -> tuple[int, int]:
    """Newest first, the groups that fit beside ``total`` tokens: the index of the
    oldest one placed whole (``len`` if none) and the tokens then used."""
    first = len(groups.costs)
    for index in range(len(groups.costs) - 1, -1, -1):
        if groups.orphan[index]:
            continue
        cost = groups.costs[index]
        if total + cost > max_tokens:
            break
        total += cost
        first = index
    return first, total


def _edge(groups: Groups, first: int) -> int | None:
    """The group at the edge of the window (the newest not placed whole, orphans
    skipped), if it may be placed cut: the newest group, or a tool call (an agent that
    no longer sees a call it made repeats it)."""
    index = first - 1
    while index >= 0 and groups.orphan[index]:
        index -= 1
    if index < 0:
        return None
    if first == len(groups.costs) or _is_call(groups.groups[index]):
        return index
    return None


def first_placed(system: System, groups: Groups, max_tokens: int) -> int:
    """Where in ``recent`` the turns ``pack(cut=False)`` places begin (``len(recent)``
    if none): every turn from there that is not an orphan tool result is placed."""
    first, _ = _walk(groups, system.tokens, max_tokens)
    edge = _edge(groups, first)
    if edge is not None:
        first = edge
    if first == len(groups.costs):
        return groups.starts[-1] + len(groups.groups[-1]) if groups.groups else 0
    return groups.starts[first]


def pack(
    *,
    blocks: Sequence[Block],
    recent: Sequence[RecentTurn],
    max_tokens: int,
    count: Callable[[str], int],
    cut: bool = True,
    grouped: Groups | None = None,
    system: System | None = None,
) -> Packed:
    """Blocks first (each trimmed if it alone is too big), then recent turns, newest first.

    ``cut=False`` only says which turns are placed: the group at the edge that would
    be placed cut is placed whole (no tokenizing), so the total may exceed the budget.
    ``grouped``: ``Groups.of(recent)``, and ``system``: ``system_message(blocks, …)``,
    from a caller that has them.
    """
    if system is None:
        system = system_message(blocks, max_tokens, count)
    groups = Groups.of(recent) if grouped is None else grouped
    first, total = _walk(groups, system.tokens, max_tokens)
    chosen: list[list[RecentTurn]] = [
        groups.groups[i] for i in range(first, len(groups.costs)) if not groups.orphan[i]
    ]
    edge = _edge(groups, first)
    if edge is not None:
        group = groups.groups[edge]
        trimmed = _trim_group(group, max_tokens - total, count) if cut else list(group)
        if trimmed is not None:
            chosen.insert(0, trimmed)
            total += sum(t.tokens for t in trimmed)

    messages: list[Message] = []
    if system.blocks:
        messages.append({"role": "system", "content": system.text})
    block_sizes = list(system.blocks)
    recent_tokens = 0
    for group in chosen:
        for turn in group:
            messages.append(turn.message)
            recent_tokens += turn.tokens
    if recent_tokens:
        block_sizes.append(("recent", recent_tokens))
    placed = len(messages) - (1 if system.blocks else 0)
    return Packed(
        messages=messages, blocks=block_sizes, tokens=total, dropped_turns=len(recent) - placed
    )


def choose_tier(block: Block, room: int, count: Callable[[str], int]) -> Block:
    """``block`` as its largest rendering that fits ``room`` tokens (the smallest when
    none does: ``pack`` then cuts it)."""
    options = [t for t in (block.text, *block.tiers) if t]
    for text in options:
        if count(text) <= room:
            return Block(block.kind, text)
    return Block(block.kind, options[-1] if options else "")


def window_tokens(
    recent: Sequence[RecentTurn],
    groups: int,
    max_tokens: int,
    *,
    grouped: Groups | None = None,
) -> int:
    """What the working window costs: the newest ``groups`` turn groups (a tool call with
    its results is one), as ``pack`` places them, at most ``max_tokens``. ``grouped``:
    ``Groups.of(recent)``, when the caller has it."""
    sized = Groups.of(recent) if grouped is None else grouped
    total = 0
    placed = 0
    for index in range(len(sized.costs) - 1, -1, -1):
        if placed == groups:
            break
        if sized.orphan[index]:
            continue
        cost = sized.costs[index]
        if total + cost > max_tokens:
            return max_tokens if not placed else total
        total += cost
        placed += 1
    return total


def _trim_group(
    group: Sequence[RecentTurn], room: int, count: Callable[[str], int]
) -> list[RecentTurn] | None:
    """The newest group alone is over budget: keep it, with its text contents cut.

    A plain message keeps a prefix. A tool call keeps the call whole and its results
    cut to an equal share each: the agent must see what it just received, and half
    a call (a call without its results) would be rejected by chat APIs.
    """
    cuttable = [
        i
        for i, t in enumerate(group)
        if t.message["role"] != "assistant" or not t.message.get("tool_calls")
    ]
    if not cuttable:
        return None
    fixed = sum(t.tokens for i, t in enumerate(group) if i not in cuttable)
    framing = MESSAGE_OVERHEAD_TOKENS + count(TRUNCATION_MARK) + count_tool_call_id(group)
    share = (room - fixed) // len(cuttable) - framing
    if share < 16:
        return None
    out = list(group)
    for i in cuttable:
        turn = group[i]
        content = turn.message.get("content") or ""
        if turn.tokens <= share + framing:
            continue
        text = truncate_to_tokens(content, share) + TRUNCATION_MARK
        message = {**turn.message, "content": text}
        out[i] = RecentTurn(message=message, tokens=count_message_tokens(message))
    if sum(t.tokens for t in out) > room:
        return None
    return out


def count_tool_call_id(group: Sequence[RecentTurn]) -> int:
    """The most a tool message's call id adds to its cost, for the share computation."""
    ids = [t.message.get("tool_call_id") or "" for t in group]
    return max((len(i) for i in ids), default=0)


def as_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The context as one string: a header per message, tool calls spelled out."""
    parts = []
    for m in messages:
        name, content = m.get("name"), m.get("content")
        head = f"{m['role']} ({name})" if name else m["role"]
        calls = m.get("tool_calls")
        if calls:
            lines = [content] if content else []
            for call in calls:
                fn = call.get("function", {})
                lines.append(f"→ {fn.get('name')}({fn.get('arguments')}) [{call.get('id')}]")
            content = "\n".join(lines)
        call_id = m.get("tool_call_id")
        if call_id:
            head += f" [{call_id}]"
        parts.append(f"{head}: {content}" if content else f"{head}: ")
    return "\n\n".join(parts)

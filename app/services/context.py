"""Read-only assembly of a session's context: precomputed state + recent raw turns.

Never calls an LLM and never writes: the worker keeps ``task_states.rendered``
current, this only reads it, in one statement (``stores/context.py``: one
snapshot, one round trip) straight through asyncpg, the hottest path of the service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.live import LiveTurn, apply_changes, live_changes, may_change
from app.compression.live_notes import (
    Withdrawn,
    answered,
    any_carrier,
    resolve,
    retire,
    with_notes,
    withdrawn,
    withdraws,
)
from app.compression.notice import with_notice
from app.context.pack import (
    Block,
    Groups,
    RecentTurn,
    System,
    as_text,
    choose_tier,
    first_placed,
    pack,
    system_message,
    window_tokens,
)
from app.core.errors import NotFound
from app.core.tokens import MESSAGE_OVERHEAD_TOKENS, count_tokens
from app.providers.embed import Embedder
from app.services.context_memories import MemoryRequest, memory_block, recent_user_texts, top_k_for
from app.stores.context import (
    CONTENT,
    OLDER_CONTENT,
    OLDER_UNITS,
    ROLE,
    SEQ,
    TOKENS,
    UNITS,
    read_context,
    read_live_user_turns,
    read_state_in_force,
)
from app.stores.engine import CONNECTION_LOST, driver_connection

# A turn as the read returns it: ``stores.context.TURN``'s fields, by position.
Row = tuple[Any, ...]

# Live turns fetched by the first read. A budget is usually full long before; a
# second read fetches up to RECENT_FETCH_LIMIT when it is not.
FIRST_PAGE = 64
RECENT_FETCH_LIMIT = 400
# Packings at most to add what left-out live turns say (each can leave more out).
LIVE_NOTE_ROUNDS = 3


def _message(t: Row) -> dict[str, Any]:
    """A turn of the read (``stores.context.TURN``) as the message it was posted as."""
    _, role, content, calls, call_id, name, _, _ = t
    message: dict[str, Any] = {"role": role, "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    if call_id is not None:
        message["tool_call_id"] = call_id
    if name is not None:
        message["name"] = name
    return message


def reachable(rows: list[Row], max_tokens: int) -> list[Row]:
    """The newest live turns (newest first) that packing can reach within ``max_tokens``.

    ``pack`` walks back from the newest turn group and stops at the first one that does
    not fit; it skips only orphan tool results, never a group's head (any turn that is
    not a tool result). So once the heads from the newest one back to a head cost
    ``max_tokens``, no older group is placed: the turns are cut after that head, its
    group whole (``pack`` may still place it cut). Turning fewer rows into messages
    is most of the saving on a long session.
    """
    heads = 0
    for i, r in enumerate(rows):
        if r[ROLE] != "tool":
            heads += r[TOKENS]
            if heads >= max_tokens:
                return rows[: i + 1]
    return rows


async def _live_turns(
    db: asyncpg.Connection,
    rows: list[Row],
    older: Sequence[Row],
    *,
    tenant: str,
    session_pk: int,
) -> list[LiveTurn]:
    """The live user turns with a text among those read for packing, and those older
    than that page: ``older``, read with the first page when it was full, or, when a
    second page was read, one more indexed read. Only those: what the live turns
    changed, left out, answered or withdrew (``live.py``, ``live_notes``) is read from
    a user turn's text alone, and every reader passes over the others (a read made a
    ``LiveTurn`` of each of its 64 turns, the assistant's and the tools' for nothing)."""
    turns = [
        LiveTurn(t[SEQ], "user", t[CONTENT], t[UNITS])
        for t in rows
        if t[ROLE] == "user" and t[CONTENT]
    ]
    if len(rows) > FIRST_PAGE:  # read for packing, not all: older live turns may be left
        older = await read_live_user_turns(
            db,
            tenant=tenant,
            session_pk=session_pk,
            before_seq=rows[-1][SEQ],
            limit=RECENT_FETCH_LIMIT,
        )
    turns += [
        LiveTurn(t[SEQ], "user", t[OLDER_CONTENT], t[OLDER_UNITS])
        for t in older
        if t[OLDER_CONTENT]
    ]
    return turns


def _as_of_live_turns(
    renderings: list[str],
    turns: list[LiveTurn],
    open_pending: list[dict[str, Any]],
    gone: list[Withdrawn],
) -> list[str]:
    """The renderings with what the live turns changed applied, whether or not those
    turns fit the budget: parameter and goal changes (``compression/live.py``: a value
    changed after the last compression is never shown as current), the questions the
    live replies answered or moved past (``live_notes.answered``: never shown as
    open) and the rules they withdrew (``gone``: never shown as in force)."""
    changes = live_changes(renderings[0], turns) if may_change(renderings[0]) else []
    answers = answered(renderings[0], open_pending, turns)
    if not changes and not answers and not gone:
        return renderings
    return [
        retire(resolve(apply_changes(r, changes), answers), gone, listed=i == 0)
        for i, r in enumerate(renderings)
    ]


# What a version of a session's state holds in force never changes (a compression or a
# restore writes a new version): read once per process, by session, version and
# rendering (a database rebuilt under the process, as in tests, reuses the first two).
_IN_FORCE: dict[tuple[int, int, str], dict[str, list[dict[str, object]]]] = {}
IN_FORCE_KEPT = 1024


async def _withdrawn(
    db: asyncpg.Connection, head: asyncpg.Record, live: list[LiveTurn], *, tenant: str
) -> list[Withdrawn]:
    """What the state holds in force that a live turn withdrew ("forget the budget
    limit"): its items are read only when a live turn withdraws something."""
    if not withdraws(head["rendered"], live):
        return []
    key = (head["id"], head["version"], head["rendered"])
    in_force = _IN_FORCE.get(key)
    if in_force is None:
        in_force = await read_state_in_force(
            db, tenant=tenant, session_pk=head["id"], version=head["version"]
        )
        if in_force is None:
            return []  # a compression replaced the version read meanwhile
        if len(_IN_FORCE) >= IN_FORCE_KEPT:
            del _IN_FORCE[next(iter(_IN_FORCE))]  # the oldest read
        _IN_FORCE[key] = in_force
    return withdrawn(head["rendered"], in_force, live)


def _left_out(live: list[LiveTurn], seqs: list[int], first: int) -> set[int]:
    """Seqs of the live user turns (``live``: ``_live_turns``) a packing that places
    the candidates from ``seqs[first]`` on does not hold: every one before that seq (the
    candidates are in seq order, the live turns not among them older; a user turn placed
    is never an orphan, so none from there on is left out)."""
    if first == len(seqs):
        return {t.seq for t in live}
    edge = seqs[first]
    return {t.seq for t in live if t.seq < edge}


def _with_live_notes(
    blocks: list[Block],
    groups: Groups,
    seqs: list[int],
    live: list[LiveTurn],
    renderings: list[str],
    state_block: Callable[[list[str]], Block],
    max_tokens: int,
) -> tuple[Block, System | None]:
    """The task-state block (``blocks[1]``) with what the live user turns the packer
    leaves out say that it does not show yet (a rule, a pinned fact, a next step:
    ``live_notes.notes_for``). A larger state can leave more turns out: once more,
    until nothing new is. Which turns are left out is asked of the packer's walk
    without cutting anything (no tokenizing); with the system message of the blocks
    it settled on (None when the last round changed them), for the packing."""
    blocks = list(blocks)
    left: set[int] = set()
    for _ in range(LIVE_NOTE_ROUNDS):
        system = system_message(blocks, max_tokens, count_tokens)
        now_left = _left_out(live, seqs, first_placed(system, groups, max_tokens))
        if now_left <= left:
            return blocks[1], system
        left |= now_left
        noted = with_notes(renderings, live, left)
        if noted is None:
            return blocks[1], system
        blocks[1] = state_block(noted)
    return blocks[1], None


@dataclass(frozen=True)
class BlockSize:
    kind: str
    tokens: int


@dataclass(frozen=True)
class Context:
    """The prompt to send: its messages (and as one text), what each block cost, and
    what the whole raw history would have cost (``full_history_tokens``)."""

    session_id: str
    user_id: str
    state_version: int
    messages: list[dict[str, Any]]
    text: str
    blocks: list[BlockSize]
    tokens: int
    max_tokens: int
    full_history_tokens: int
    memory_ids: list[int]


@dataclass(frozen=True)
class MemoryOptions:
    embedder: Embedder | None
    # The memory block's default share when the query is the latest user turn.
    budget_tokens: int
    # The fewest candidates a search asks for; a larger budget asks for more.
    top_k: int
    # Per-request overrides: the memory block's size and candidate count.
    memory_tokens: int | None = None
    memory_k: int | None = None
    # Newest turn groups never given up for memory (the working window).
    window_turns: int = 3


# Tokens kept free of the memory block: BPE over the joined system message can
# count a little more than its lines did one by one.
SLACK_TOKENS = 8


def memory_budget(memory: MemoryOptions, *, remainder: int, explicit_query: bool) -> int:
    """The caller's budget governs: what is left after the task state and the working
    window goes to memory when a query asks for it (or ``memory_tokens``, if smaller);
    for the latest user turn, at most the configured share and half of what is left,
    so that older live turns keep the other half."""
    if memory.memory_tokens is not None:
        return max(0, min(memory.memory_tokens, remainder))
    if explicit_query:
        return max(0, remainder)
    return max(0, min(memory.budget_tokens, remainder // 2))


async def build_context(
    conn: AsyncConnection,
    *,
    tenant: str,
    session: str,
    max_tokens: int,
    query: str | None = None,
    memory: MemoryOptions | None = None,
    notice: bool = True,
) -> Context:
    """``context_on`` the driver connection under ``conn``, for a caller that holds a
    SQLAlchemy connection (the memory block's search runs on ``conn``)."""
    db = await driver_connection(conn)

    async def held() -> tuple[AsyncConnection, asyncpg.Connection]:
        return conn, db

    try:
        return await context_on(
            db,
            held,
            tenant=tenant,
            session=session,
            max_tokens=max_tokens,
            query=query,
            memory=memory,
            notice=notice,
        )
    except CONNECTION_LOST:
        # Read through the driver, so the pool must be told the connection is gone.
        await conn.invalidate()
        raise


async def context_on(
    db: asyncpg.Connection,
    connect: Callable[[], Awaitable[tuple[AsyncConnection, asyncpg.Connection]]],
    *,
    tenant: str,
    session: str,
    max_tokens: int,
    query: str | None = None,
    memory: MemoryOptions | None = None,
    notice: bool = True,
) -> Context:
    """The session's context, read on ``db``. ``connect`` gives the SQLAlchemy
    connection the memory block's search runs on, only when there is a memory block,
    with the driver connection the read goes on with."""
    head = await read_context(
        db,
        tenant=tenant,
        session=session,
        limit=FIRST_PAGE,
        offset=0,
        older_users=RECENT_FETCH_LIMIT,
    )
    if head is None:
        raise NotFound(f"session {session!r} not found")
    rows: list[Row] = head["turns"]
    if len(rows) == FIRST_PAGE and sum(r[TOKENS] for r in rows) < max_tokens:
        more = await read_context(
            db,
            tenant=tenant,
            session=session,
            limit=RECENT_FETCH_LIMIT - FIRST_PAGE,
            offset=FIRST_PAGE,
        )
        if more is not None:
            rows.extend(more["turns"])
    candidates = list(reversed(reachable(rows, max_tokens)))
    recent = [RecentTurn(_message(r), r[TOKENS]) for r in candidates]
    # Budget: the working window and the task state first (the largest of the
    # renderings stored at compression time that fits beside the window), then
    # memory and older live turns.
    groups = Groups.of(recent)  # once: the window, the live notes' walks and the packing
    window = window_tokens(
        recent,
        memory.window_turns if memory else 3,
        max_tokens - MESSAGE_OVERHEAD_TOKENS,
        grouped=groups,
    )
    # A session of a task: the task's shared state first, then the session's own.
    room = max_tokens - MESSAGE_OVERHEAD_TOKENS - window
    shared = choose_tier(
        Block("task_shared", head["shared"], tiers=tuple(head["shared_tiers"] or ())),
        room,
        count_tokens,
    )
    room -= count_tokens(shared.text + "\n\n") if shared.text else 0
    # The change notice is the first thing to go: each rendering with it, then without.
    line = head["notice"] if notice and head["notice"] else ""
    live = await _live_turns(
        db, rows, head["older_user_turns"], tenant=tenant, session_pk=head["id"]
    )
    carrier = any_carrier(live)
    gone = await _withdrawn(db, head, live, tenant=tenant) if carrier else []
    renderings = _as_of_live_turns(
        [head["rendered"], *(head["renderings"] or ())], live, head["open_pending"], gone
    )

    def state_block(renderings: list[str]) -> Block:
        options = [v for t in renderings for v in dict.fromkeys((with_notice(t, line), t))]
        return choose_tier(
            Block("task_state", options[0], tiers=tuple(options[1:])), room, count_tokens
        )

    state = state_block(renderings)
    blocks = [shared, state]
    memory_ids: list[int] = []
    remainder = room - (count_tokens(state.text + "\n\n") if state.text else 0) - SLACK_TOKENS
    explicit = query.strip() if query and query.strip() else None
    budget = (
        memory_budget(memory, remainder=remainder, explicit_query=explicit is not None)
        if memory is not None
        else 0
    )
    if memory is not None and head["has_memories"] and budget > 0:
        hidden = head["hidden"]
        latest = next(
            ((r[SEQ], r[CONTENT]) for r in rows if r[ROLE] == "user" and r[CONTENT]), None
        )
        conn, db = await connect()
        text, placed = await memory_block(
            conn,
            db,
            MemoryRequest(
                session_pk=head["id"],
                user_pk=head["user_id"],
                explicit_query=explicit,
                latest_user=latest,
                recent_user_texts=recent_user_texts(
                    r[CONTENT] for r in rows if r[ROLE] == "user" and r[CONTENT]
                ),
                last_embedded_seq=head["last_user_seq"],
                budget_tokens=budget,
                top_k=memory.memory_k
                if memory.memory_k is not None
                else top_k_for(budget, memory.top_k),
                oldest_live_seq=min((r[SEQ] for r in rows), default=None),
                hidden_sessions=frozenset(hidden["pks"]),
                hidden_session_ids=frozenset(hidden["ids"]),
            ),
            embedder=memory.embedder,
        )
        blocks.append(Block("memories", text))
        memory_ids = [m.id for m in placed]
    system = None
    if carrier:
        blocks[1], system = _with_live_notes(
            blocks,
            groups,
            [r[SEQ] for r in candidates],
            live,
            renderings,
            state_block,
            max_tokens,
        )
    packed = pack(
        blocks=blocks,
        recent=recent,
        max_tokens=max_tokens,
        count=count_tokens,
        grouped=groups,
        system=system,
    )
    return Context(
        session_id=session,
        user_id=head["user_external"],
        state_version=head["version"],
        messages=packed.messages,
        text=as_text(packed.messages),
        blocks=[BlockSize(kind=k, tokens=t) for k, t in packed.blocks],
        tokens=packed.tokens,
        max_tokens=max_tokens,
        full_history_tokens=head["total_tokens"],
        memory_ids=memory_ids if "memories" in [k for k, _ in packed.blocks] else [],
    )

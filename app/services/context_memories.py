"""The long-term memory block of a context: gate, query, hybrid retrieval, budget.

Called on the /context path, so it is careful with cost: nothing at all when the
user has no memories or the latest turn is an acknowledgement; the query vector
is the worker's embedding of the latest user turn when it is current, and only
an explicit ``query`` is embedded here.

What goes in, by value per token within the budget the caller's ``max_tokens``
left for it:

* pinned high-stakes facts, always, then curated memories (preferences, facts);
* evidence from past conversations **turn by turn**: a single-turn hit as it is,
  an episode hit as its turns (each once, however many hits cover it), and the
  other half of a question/answer pair split from a hit; near-duplicates give way
  to different evidence (MMR over the candidates' words);
* from the *same* session only what was compacted away (restore on miss): its
  live turns are in the context already.

Turns are shown chronologically under a date line — "7 May 2023 (2023-05-07)" /
"2023年5月7日 (2023-05-07)" — so "when did …" questions can be answered.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import UTC, date, datetime
from itertools import chain, islice

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.render import detect_language
from app.core.tokens import count_tokens
from app.memories.bm25 import search_terms, term_matcher
from app.memories.fuse import mmr_words
from app.memories.gate import build_query, needs_retrieval
from app.memories.when import date_label
from app.providers.embed import Embedder, EmbeddingError
from app.services.memories import age_label, hybrid_search
from app.stores import memories as repo
from app.stores import sessions
from app.stores.memories import MemoryRow

log = logging.getLogger(__name__)

HEADERS = {"en": "## Long-term memory", "zh": "## 长期记忆"}
PINNED = {"en": "pinned", "zh": "置顶"}
# A turn reached through an episode hit is worth a share of the hit: the whole of it
# for the turn that matches the query's words best, EPISODE_FLOOR for one that shares
# none of them, EPISODE_SHARE each when the episode matched by meaning alone. The other
# half of a split question/answer pair is worth PAIR_SHARE of the turn that was hit.
EPISODE_SHARE = 0.5
EPISODE_FLOOR = 0.25
PAIR_SHARE = 0.8
# Candidates per retrieval list: about one per this many tokens of budget.
TOKENS_PER_CANDIDATE = 25
MIN_CANDIDATES = 20
MAX_CANDIDATES = 200
# Turns fetched to show episode hits and pairs: about one per this many tokens.
TOKENS_PER_FETCHED_TURN = 12
# Without an explicit query (the latest user turn stands in), only evidence worth
# this share of the best match comes in: the block does not fill up with loose matches.
IMPLICIT_FLOOR = 0.5
# Turns are picked by value / tokens ** this: 0 is by value alone, 1 by value per token.
DENSITY_EXPONENT = 0.5
# Turns up to this long count as this long: a one-liner is not worth more than a
# sentence of evidence for being short.
DENSITY_FLOOR_TOKENS = 128
# MMR reorders the best this many turns (cost grows with its square).
MMR_DEPTH = 40
MMR_LAMBDA = 0.8
# MMR orders turns until they hold this many times the budget; the rest only fill gaps.
MMR_FILL = 2
# The block's language is told from the query and this many of the first turns picked.
LANGUAGE_SAMPLE = 5


@dataclasses.dataclass(frozen=True)
class MemoryRequest:
    session_pk: int
    user_pk: int
    explicit_query: str | None
    latest_user: tuple[int, str] | None  # (seq, text) of the newest user turn in view
    recent_user_texts: list[str]  # oldest first
    last_embedded_seq: int | None
    budget_tokens: int
    top_k: int
    # Own-session memories of turns older than this (compacted away) may come back.
    oldest_live_seq: int | None = None
    # Sessions of the same user that belong to other agents: what came from them
    # (their turns, what they promoted) is their private working state.
    # (Promoted memories name their session by its id in ``source``.)
    hidden_sessions: frozenset[int] = frozenset()
    hidden_session_ids: frozenset[str] = frozenset()


def _hidden(m: MemoryRow, request: MemoryRequest) -> bool:
    return (
        m.session_id in request.hidden_sessions
        or m.source.get("session_id") in request.hidden_session_ids
    )


def top_k_for(budget_tokens: int, floor: int) -> int:
    """How many candidates a budget can use: the budget decides, not a constant."""
    return max(floor, min(MAX_CANDIDATES, budget_tokens // TOKENS_PER_CANDIDATE))


@dataclasses.dataclass(slots=True)
class _Turn:
    row: MemoryRow
    value: float
    session_pk: int
    seq: int
    tokens: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.tokens = _tokens(self.row)

    @property
    def key(self) -> tuple[int, int]:
        return (self.session_pk, self.seq)

    @property
    def density(self) -> float:
        """Evidence per token: value, discounted for length (a long turn must be worth
        more than the several short ones it would displace)."""
        density: float = self.value / max(self.tokens, DENSITY_FLOOR_TOKENS) ** DENSITY_EXPONENT
        return density


@dataclasses.dataclass(frozen=True, slots=True)
class _Episode:
    """An episode hit with its session and the seqs of its turns (read once)."""

    row: MemoryRow
    session_pk: int
    seqs: list[int]


def _tokens(m: MemoryRow) -> int:
    return int(m.metadata.get("tokens") or count_tokens(m.text + "\n"))


def _is_turn(m: MemoryRow) -> bool:
    return m.kind == "episode" and m.metadata.get("granularity") == "turn"


def _seqs(m: MemoryRow) -> list[int]:
    return [int(s) for s in m.source.get("seqs") or []]


def _content(text: str) -> str:
    """A turn's text without its speaker."""
    return text.partition(": ")[2] or text


def _asks(m: MemoryRow) -> bool:
    return _content(m.text).rstrip().endswith(("?", "？"))


async def memory_block(
    conn: AsyncConnection,
    db: asyncpg.Connection,
    request: MemoryRequest,
    *,
    embedder: Embedder | None,
) -> tuple[str, list[MemoryRow]]:
    """The rendered block and the memories in it ('' and [] when there is nothing)."""
    found: list[MemoryRow] = []
    query = request.explicit_query or (request.latest_user[1] if request.latest_user else "")
    terms: list[str] | None = None
    if request.top_k and needs_retrieval(query):
        if not request.explicit_query:
            query = build_query(query, request.recent_user_texts[:-1])
        terms = search_terms(query)  # the lexical leg's, and the episodes' turns' share
        vector = None
        if request.explicit_query is None and embedder is not None and request.latest_user:
            if request.latest_user[0] == request.last_embedded_seq:
                vector = await sessions.last_user_embedding(db, session_pk=request.session_pk)
        search = functools.partial(
            hybrid_search, conn, user_pk=request.user_pk, query=query, k=request.top_k, terms=terms
        )
        try:
            found = await search(
                embedder=embedder if (vector is not None or request.explicit_query) else None,
                query_vector=vector,
            )
        except EmbeddingError as exc:
            # The embedding service failed the query (an explicit one: an implicit query
            # reads the vector stored with the turn). A context is still owed: the
            # memories the lexical leg finds, and a warning for the operator.
            log.warning("session %s: context memories by words alone: %s", request.session_pk, exc)
            found = await search(embedder=None, query_vector=None)
    found = [m for m in found if _visible(m, request)]
    turns, whole, pinned = await _turns(
        db,
        request,
        [m for m in found if m.kind == "episode"],
        search_terms(query) if terms is None else terms,
    )
    pinned = [m for m in pinned if not _hidden(m, request)]
    seen = {m.id for m in pinned}
    facts = [m for m in found if m.kind != "episode" and m.id not in seen]
    order = _diversify(turns, request.budget_tokens)
    shown: Iterable[_Turn]
    if request.explicit_query is None and turns:
        floor = max(t.value for t in turns) * IMPLICIT_FLOOR
        shown, first = _worth(order, floor, sum(1 for t in turns if t.value >= floor))
        unread: Sequence[_Turn] = ()
    else:
        # Read on as the budget takes them: no pick is made once none left could fit.
        first = list(islice(order, LANGUAGE_SAMPLE))
        shown, unread = chain(first, order), turns
    language = detect_language([query, *(t.row.text for t in first)])
    now = datetime.now(UTC)
    return _render(
        pinned + facts, whole, shown, request.budget_tokens, language, now, unread=unread
    )


def _worth(order: Iterator[_Turn], floor: float, count: int) -> tuple[list[_Turn], list[_Turn]]:
    """The ``count`` turns of ``order`` worth ``floor`` or more, in its order, and its
    first LANGUAGE_SAMPLE turns: read no further than both need. (Most of a diversified
    order falls below an implicit query's floor: its picks after the last turn above
    it are never made.)"""
    kept: list[_Turn] = []
    first: list[_Turn] = []
    for turn in order:
        if len(first) < LANGUAGE_SAMPLE:
            first.append(turn)
        if turn.value >= floor:
            kept.append(turn)
        if len(kept) == count and len(first) == LANGUAGE_SAMPLE:
            break
    return kept, first


def _visible(m: MemoryRow, request: MemoryRequest) -> bool:
    """Another session's memories; this session's only where compacted away, and only
    when asked with an explicit query (restore on miss): its task state and live turns
    stand for it otherwise. Never what came from another agent's session."""
    if _hidden(m, request):
        return False
    if m.session_id != request.session_pk:
        return True
    if request.explicit_query is None:
        return False
    seqs = _seqs(m)
    if not seqs:
        return False
    return request.oldest_live_seq is None or max(seqs) < request.oldest_live_seq


async def _turns(
    db: asyncpg.Connection, request: MemoryRequest, hits: Sequence[MemoryRow], terms: list[str]
) -> tuple[list[_Turn], list[MemoryRow], list[MemoryRow]]:
    """Episode and turn hits as turns valued by what points at them, the densest first
    (``_diversify`` orders them for the block); the episodes that have no turn rows
    (indexed before turns were), to show whole; and the user's high-stakes memories
    (read with the turns: one round trip).

    A turn's value adds up its signals, as rank fusion does: its own hit (both legs
    fused), and the best of two indirect ones: the episode it is part of (shared by the
    episode's turns after their own match with the query, so that the turn that made the
    episode match is worth the episode, and its small talk half of it or less), and a
    hit on the other half of its question/answer pair."""
    direct: dict[tuple[int, int], _Turn] = {}
    indirect: dict[tuple[int, int], float] = {}  # turns to fetch, and their indirect value
    episodes: list[_Episode] = []
    for m in hits:
        score = m.score or 0.0
        if m.session_id is None:
            continue
        if _is_turn(m):
            [seq] = _seqs(m)[:1] or [0]
            if (m.session_id, seq) not in direct:
                direct[m.session_id, seq] = _Turn(m, score, m.session_id, seq)
            continue
        episode = _Episode(m, m.session_id, _seqs(m))
        episodes.append(episode)
        for seq in episode.seqs:
            key = (m.session_id, seq)
            indirect[key] = max(indirect.get(key, 0.0), score)
    # Fetch no more turns than the budget could show (best first), and the neighbours
    # of the turns that were hit, for split question/answer pairs.
    priority = {k: v * EPISODE_SHARE for k, v in indirect.items()}
    for turn in direct.values():
        for seq in (turn.seq - 1, turn.seq + 1):
            key = (turn.session_pk, seq)
            priority[key] = max(priority.get(key, 0.0), turn.value * PAIR_SHARE)
    missing = sorted((k for k in priority if k not in direct), key=lambda k: -priority[k])
    missing = missing[: max(MIN_CANDIDATES, request.budget_tokens // TOKENS_PER_FETCHED_TURN)]
    # The hits' values are read (for their pairs) before any turn's value grows.
    by_key = dict(direct)
    # Of those, only the rows that can gain a value are read: an episode's turns, the
    # turn before a hit (a question it may answer), and the turn after a hit that asks.
    # The turn after a hit that does not ask would be read only to be worth nothing.
    wanted = set(indirect)
    for turn in direct.values():
        wanted.add((turn.session_pk, turn.seq - 1))
        if _asks(turn.row):
            wanted.add((turn.session_pk, turn.seq + 1))
    rows, pinned = await repo.turns_and_pinned(
        db, user_pk=request.user_pk, pairs=[k for k in missing if k in wanted]
    )
    for row in rows:
        if row.session_id is None or not _visible(row, request):
            continue
        key = (row.session_id, _seqs(row)[0])
        by_key.setdefault(key, _Turn(row, 0.0, *key))
    extra = _episode_values(episodes, by_key, terms)
    for turn in direct.values():
        before = by_key.get((turn.session_pk, turn.seq - 1))
        after = by_key.get((turn.session_pk, turn.seq + 1))
        if after is not None and _asks(turn.row):
            extra[after.key] = max(extra.get(after.key, 0.0), turn.value * PAIR_SHARE)
        if before is not None and _asks(before.row):
            extra[before.key] = max(extra.get(before.key, 0.0), turn.value * PAIR_SHARE)
    for key, value in extra.items():
        if key in by_key:
            by_key[key].value += value
    ranked = sorted((t for t in by_key.values() if t.value > 0), key=lambda t: -t.density)
    whole = _shown_whole(episodes, by_key.keys(), set(missing))
    return ranked, whole, pinned


def _shown_whole(
    episodes: Sequence[_Episode],
    held: Collection[tuple[int, int]],
    asked: Collection[tuple[int, int]],
) -> list[MemoryRow]:
    """The episodes to show whole: those none of whose turns has a row although every
    one was asked for (indexed before turn rows were). An episode whose turns fell past
    the fetch limit is a weak hit, not an old row: it is left out, never shown ahead
    of the evidence (as a fact line) for want of its turns."""
    return [
        e.row
        for e in episodes
        if not any((e.session_pk, s) in held for s in e.seqs)
        and all((e.session_pk, s) in asked for s in e.seqs)
    ]


def _episode_values(
    episodes: Sequence[_Episode], turns: dict[tuple[int, int], _Turn], terms: list[str]
) -> dict[tuple[int, int], float]:
    """What each turn gets from the best episode hit it is part of: the episode's score
    times the turn's share, from 1 for the turn that shares the most of the query's
    words (``terms``) down to EPISODE_FLOOR for one that shares none (EPISODE_SHARE each
    when no turn shares any: the episode was found by meaning)."""
    if not episodes:
        return {}
    matched = term_matcher(terms)
    counts: dict[tuple[int, int], int] = {}
    out: dict[tuple[int, int], float] = {}
    for e in episodes:
        keys = [(e.session_pk, seq) for seq in e.seqs if (e.session_pk, seq) in turns]
        for key in keys:
            if key not in counts:
                counts[key] = matched(turns[key].row.text)
        matches = {key: counts[key] for key in keys}
        best = max(matches.values(), default=0)
        for key, match in matches.items():
            share = (
                EPISODE_SHARE if best == 0 else EPISODE_FLOOR + (1 - EPISODE_FLOOR) * match / best
            )
            out[key] = max(out.get(key, 0.0), (e.row.score or 0.0) * share)
    return out


def _diversify(ranked: list[_Turn], budget_tokens: int) -> Iterator[_Turn]:
    """MMR over the best turns (relevance = value, redundancy = shared words), ordered
    until the picks hold MMR_FILL times the budget (a pick may not fit when packed);
    the turns after that keep their order by value, for the gaps. Each pick is made as
    the caller reads on."""
    head, tail = ranked[:MMR_DEPTH], ranked[MMR_DEPTH:]
    if len(head) < 3:
        yield from ranked
        return
    picked_tokens = 0

    def filled(key: tuple[int, int]) -> bool:
        nonlocal picked_tokens
        picked_tokens += index[key].tokens
        return picked_tokens >= MMR_FILL * budget_tokens

    densities = [t.density for t in head]
    top = max(densities) or 1.0
    index = {t.key: t for t in head}
    # Best first (``ranked`` is by density): MMR reads the words of the turns it may
    # pick, not of every turn of the head.
    order = mmr_words(
        [(t.key, density / top) for t, density in zip(head, densities, strict=True)],
        words=lambda key: _words(index[key].row.text),
        lambda_=MMR_LAMBDA,
        top_k=len(head),
        stop_after=filled,
    )
    chosen: set[tuple[int, int]] = set()
    for key in order:
        chosen.add(key)
        yield index[key]
    yield from (t for t in head if t.key not in chosen)
    yield from tail


def _words(text: str) -> frozenset[str]:
    """A turn's words as MMR compares them: its content (the speaker left out), folded."""
    return frozenset(_content(text).lower().split())


def _day(m: MemoryRow) -> date:
    raw = m.source.get("from")
    if raw:
        try:
            return datetime.fromisoformat(str(raw)).date()
        except ValueError:
            pass
    return m.created_at.date()


def _render(
    items: Sequence[MemoryRow],
    whole: Sequence[MemoryRow],
    turns: Iterable[_Turn],
    budget: int,
    language: str,
    now: datetime,
    *,
    unread: Sequence[_Turn] = (),
) -> tuple[str, list[MemoryRow]]:
    """Pick within ``budget`` tokens (facts, then evidence by value), render by date.
    ``unread``: every turn ``turns`` may yield, when it is to be read no further once
    none of those not read yet could fit what is left (each costs its tokens at least)."""
    count: Callable[[str], int] = count_tokens
    header = HEADERS[language]
    left = budget - count(header + "\n")
    if left <= 0:
        return "", []
    facts: list[tuple[MemoryRow, str]] = []
    for m in [*items, *whole]:
        line = _line(m, now, language)
        cost = count(line + "\n")
        if cost <= left:
            facts.append((m, line))
            left -= cost
    groups: dict[tuple[date, int], list[_Turn]] = {}
    days: set[date] = set()
    by_size = sorted(unread, key=lambda t: t.tokens)
    read: set[tuple[int, int]] = set()
    smallest = 0  # in by_size: the smallest turn not read yet
    for turn in turns:
        if left <= 0:
            break
        if by_size:
            read.add(turn.key)
        key = (_day(turn.row), turn.session_pk)
        cost = turn.tokens
        if key[0] not in days:  # one date line per day, however many sessions
            cost += count(f"[{date_label(key[0], language)}]\n")
        if cost <= left:
            groups.setdefault(key, []).append(turn)
            days.add(key[0])
            left -= cost
        if by_size:
            while smallest < len(by_size) and by_size[smallest].key in read:
                smallest += 1
            if smallest == len(by_size) or by_size[smallest].tokens > left:
                break
    if not facts and not groups:
        return "", []
    lines = [header, *(line for _, line in facts)]
    placed = [m for m, _ in facts]
    shown: date | None = None
    for key in sorted(groups, key=lambda k: (k[0], min(t.seq for t in groups[k]), k[1])):
        if key[0] != shown:
            lines.append(f"[{date_label(key[0], language)}]")
            shown = key[0]
        for turn in sorted(groups[key], key=lambda t: t.seq):
            lines.append(turn.row.text)
            placed.append(turn.row)
    return "\n".join(lines), placed


def _line(m: MemoryRow, now: datetime, language: str) -> str:
    tag = f", {PINNED[language]}" if m.pinned else ""
    # An episode is dated by when it happened (its turns' time), a fact by its age.
    when = (
        date_label(_day(m), language)
        if m.kind == "episode"
        else age_label(m.last_confirmed_at, now)
    )
    return f"- ({when}{tag}) {m.text}"


def recent_user_texts(texts: Iterable[str], limit: int = 4) -> list[str]:
    """The first ``limit`` of ``texts`` (user texts, newest first), oldest first."""
    return list(reversed(list(islice(texts, limit))))

"""How /context values evidence turns reached through an episode hit (pure parts)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from app.core.tokens import count_tokens
from app.memories.bm25 import search_terms
from app.services import context_memories as cm
from app.stores import memories as memories_store
from app.stores.memories import MemoryRow

WHEN = datetime(2024, 3, 1, tzinfo=UTC)


def row(mid: int, text: str, seqs: list[int], *, turn: bool, score: float = 0.0) -> MemoryRow:
    return MemoryRow(
        id=mid,
        kind="episode",
        text=text,
        pinned=False,
        source={"seqs": seqs},
        metadata={"granularity": "turn"} if turn else {},
        created_at=WHEN,
        last_confirmed_at=WHEN,
        times_confirmed=1,
        expires_at=None,
        superseded_by=None,
        session_id=7,
        embedding_model=None,
        score=score,
    )


def episodes(*rows: MemoryRow) -> list[cm._Episode]:
    return [cm._Episode(m, 7, cm._seqs(m)) for m in rows]


def turns(*texts: str) -> dict[tuple[int, int], cm._Turn]:
    return {
        (7, seq): cm._Turn(row(100 + seq, text, [seq], turn=True), 0.0, 7, seq)
        for seq, text in enumerate(texts, start=1)
    }


def test_the_turn_that_made_an_episode_match_is_worth_the_episode_its_small_talk_less() -> None:
    held = turns(
        "Ben: Lovely weather today.",
        "Ana: For my brother's graduation I bought him a telescope.",
        "Ben: That sounds great!",
    )
    episode = row(1, "whole episode", [1, 2, 3], turn=False, score=0.04)
    values = cm._episode_values(
        episodes(episode), held, search_terms("what did I buy for my brother's graduation")
    )
    assert values[(7, 2)] == pytest.approx(0.04)
    assert values[(7, 1)] == values[(7, 3)] == pytest.approx(0.04 * cm.EPISODE_FLOOR)


def test_an_episode_found_by_meaning_alone_is_shared_evenly() -> None:
    held = turns("Ben: Lovely weather today.", "Ana: Indeed, sunny and warm.")
    episode = row(1, "whole episode", [1, 2], turn=False, score=0.03)
    values = cm._episode_values(episodes(episode), held, search_terms("telescope purchase"))
    assert values == {k: pytest.approx(0.03 * cm.EPISODE_SHARE) for k in held}


def test_a_turn_keeps_the_best_of_the_episodes_it_is_part_of() -> None:
    held = turns("Ana: I bought a telescope.", "Ben: Nice.")
    weak = row(1, "episode a", [1, 2], turn=False, score=0.01)
    strong = row(2, "episode b", [1], turn=False, score=0.05)
    values = cm._episode_values(episodes(weak, strong), held, search_terms("telescope"))
    assert values[(7, 1)] == pytest.approx(0.05)
    assert values[(7, 2)] == pytest.approx(0.01 * cm.EPISODE_FLOOR)


def test_a_long_turn_is_discounted_less_than_in_proportion_to_its_length() -> None:
    short = cm._Turn(row(1, "Ana: short", [1], turn=True), 0.01, 7, 1)
    long = cm._Turn(row(2, "Ben: " + "word " * 600, [2], turn=True), 0.03, 7, 2)
    # Three times the value at ~4.7 times the (floored) length: worth it at sqrt, not
    # per token (a reply that was hit from two sides must not lose to every one-liner).
    assert long.density > short.density
    assert long.value / long.tokens < short.value / cm.DENSITY_FLOOR_TOKENS


def test_an_episode_is_shown_whole_only_when_its_turns_were_asked_for_and_none_exist() -> None:
    old = row(1, "episode indexed before turn rows", [1, 2], turn=False, score=0.02)
    cut = row(2, "episode whose turns fell past the fetch limit", [3, 4], turn=False)
    shown = row(3, "episode shown turn by turn", [5], turn=False, score=0.03)
    whole = cm._shown_whole(
        episodes(old, cut, shown), held={(7, 5)}, asked={(7, 1), (7, 2), (7, 3), (7, 5)}
    )
    assert whole == [old]


def test_turns_of_two_sessions_of_one_day_share_one_date_line() -> None:
    def turn(session: int, seq: int, text: str) -> cm._Turn:
        r = dataclasses.replace(
            row(seq, text, [seq], turn=True), session_id=session, source={"seqs": [seq]}
        )
        return cm._Turn(r, 0.02, session, seq)

    picked = [turn(1, 3, "Ana: I adopted a cat."), turn(2, 1, "Ana: The cat is called Miso.")]
    text, placed = cm._render([], [], picked, 200, "en", WHEN)
    assert text.count("[1 March 2024 (2024-03-01)]") == 1
    assert len(placed) == 2 and "adopted" in text and "Miso" in text


def test_a_near_duplicate_of_a_better_turn_gives_way_to_different_evidence() -> None:
    texts = [
        "Ana: We hiked the red canyon trail on Sunday.",
        "Ana: We hiked the red canyon trail on Sunday morning.",
        "Ben: My sister moved to Oslo in May.",
        "Ben: The bakery on the corner closed.",
    ]
    ranked = [
        cm._Turn(row(100 + seq, text, [seq], turn=True), value, 7, seq)
        for seq, (text, value) in enumerate(zip(texts, [1.0, 0.95, 0.9, 0.5], strict=True))
    ]
    picked = cm._diversify(ranked, budget_tokens=1000)
    assert [t.seq for t in picked] == [0, 2, 1, 3]
    # Nothing alike: the order by value stands.
    unlike = [ranked[0], ranked[2], ranked[3]]
    assert [t.seq for t in cm._diversify(unlike, budget_tokens=1000)] == [0, 2, 3]


async def test_the_turn_after_a_hit_that_does_not_ask_is_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only rows that can gain a value are read, and the picks are the ones reading
    every neighbour of every hit gives."""
    stored = {
        (7, seq): row(100 + seq, text, [seq], turn=True)
        for seq, text in enumerate(
            [
                "Ana: Where did you go in May?",
                "Ben: We went kayaking on the lake.",  # a hit that does not ask
                "Ana: Nice.",
                "Ben: We swam too.",  # the turn before a hit: read, though it does not ask
                "Ana: What did you paint there?",  # a hit that asks
                "Ben: A lighthouse.",
                "Ana: Lovely.",
            ],
            start=1,
        )
    }
    hits = [
        dataclasses.replace(stored[(7, 2)], score=0.03),
        dataclasses.replace(stored[(7, 5)], score=0.02),
        row(50, "episode", [6, 7], turn=False, score=0.01),
    ]
    request = cm.MemoryRequest(
        session_pk=1,
        user_pk=1,
        explicit_query=None,
        latest_user=None,
        recent_user_texts=[],
        last_embedded_seq=None,
        budget_tokens=400,
        top_k=10,
    )
    asked: list[tuple[int, int]] = []

    async def read_asked(
        _: object, *, user_pk: int, pairs: list[tuple[int, int]]
    ) -> tuple[list[MemoryRow], list[MemoryRow]]:
        asked.extend(pairs)
        return [stored[k] for k in pairs if k in stored], []

    async def read_every_neighbour(
        _: object, *, user_pk: int, pairs: list[tuple[int, int]]
    ) -> tuple[list[MemoryRow], list[MemoryRow]]:
        return [m for k, m in stored.items() if k not in {(7, 2), (7, 5)}], []

    def picks(out: tuple[list[cm._Turn], list[MemoryRow], list[MemoryRow]]) -> list[object]:
        return [[(t.row.id, t.value) for t in out[0]], out[1], out[2]]

    terms = search_terms("where did we paint")
    db: Any = None
    monkeypatch.setattr(memories_store, "turns_and_pinned", read_asked)
    got = await cm._turns(db, request, hits, terms)
    monkeypatch.setattr(memories_store, "turns_and_pinned", read_every_neighbour)
    expected = await cm._turns(db, request, hits, terms)
    assert sorted(asked) == [(7, 1), (7, 4), (7, 6), (7, 7)]
    assert picks(got) == picks(expected)
    assert {t.row.id for t in got[0]} == {101, 102, 105, 106, 107}


def test_an_implicit_querys_turns_are_read_from_the_order_no_further_than_needed() -> None:
    """The turns worth the floor, in the order's order, and its first turns for the
    language: the order is not read past the last of both."""

    def order(values: list[float], readable: int) -> Iterator[cm._Turn]:
        for seq, value in enumerate(values):
            assert seq < readable, "read past what was needed"
            yield cm._Turn(row(seq, f"Ana: turn {seq}", [seq], turn=True), value, 7, seq)

    values = [1.0, 0.2, 0.9, 0.1, 0.3, 0.05, 0.04]
    kept, first = cm._worth(order(values, readable=5), 0.5, 2)
    assert [t.seq for t in kept] == [0, 2]
    assert [t.seq for t in first] == [0, 1, 2, 3, 4]
    late = [0.1, 0.2, 0.9, 0.3, 0.4, 0.05, 0.6, 0.01]
    kept, first = cm._worth(order(late, readable=7), 0.5, 2)
    assert [t.seq for t in kept] == [2, 6]
    assert [t.seq for t in first] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("seed", range(20))
def test_the_turns_shown_are_those_of_the_whole_diversified_order_above_the_floor(
    seed: int,
) -> None:
    """Read lazily, the diversified order gives the same turns above the floor, in the
    same order, as the whole order filtered."""
    rng = random.Random(seed)
    vocabulary = ["kayak", "lake", "paint", "lighthouse", "sister", "oslo", "bakery", "may"]
    ranked = sorted(
        (
            cm._Turn(
                row(seq, "Ana: " + " ".join(rng.sample(vocabulary, 3)), [seq], turn=True),
                rng.random(),
                7,
                seq,
            )
            for seq in range(rng.randint(0, 45))
        ),
        key=lambda t: -t.density,
    )
    floor = max((t.value for t in ranked), default=0.0) * cm.IMPLICIT_FLOOR
    whole = list(cm._diversify(ranked, 400))
    kept, first = cm._worth(
        cm._diversify(ranked, 400), floor, sum(1 for t in ranked if t.value >= floor)
    )
    assert kept == [t for t in whole if t.value >= floor]
    assert first == whole[: cm.LANGUAGE_SAMPLE]


@pytest.mark.parametrize("seed", range(20))
def test_a_block_read_on_as_the_budget_takes_turns_is_the_block_of_the_whole_order(
    seed: int,
) -> None:
    """Given every turn it may read (``unread``), the block stops reading once none of
    those not read could fit: the same block as from the whole order, and nothing read
    past that point."""
    rng = random.Random(seed)
    pool = [
        cm._Turn(row(seq, "Ana: " + "word " * rng.randint(1, 60), [seq], turn=True), 1.0, 7, seq)
        for seq in range(rng.randint(1, 30))
    ]
    rng.shuffle(pool)
    budget = rng.randint(20, 600)
    whole = cm._render([], [], pool, budget, "en", WHEN)
    read: list[cm._Turn] = []

    def reading() -> Iterator[cm._Turn]:
        for turn in pool:
            read.append(turn)
            yield turn

    assert cm._render([], [], reading(), budget, "en", WHEN, unread=pool) == whole
    lines = whole[0].split("\n") if whole[0] else [cm.HEADERS["en"]]
    left = budget - sum(count_tokens(line + "\n") for line in lines)
    if len(read) < len(pool):  # stopped early: none of the rest could have fitted
        assert min(t.tokens for t in pool[len(read) :]) > left


def test_a_block_whose_budget_is_spent_reads_no_further_turn() -> None:
    pool = [
        cm._Turn(row(seq, "Ana: " + "word " * 40, [seq], turn=True), 1.0, 7, seq)
        for seq in range(9)
    ]
    read: list[int] = []

    def reading() -> Iterator[cm._Turn]:
        for turn in pool:
            read.append(turn.seq)
            yield turn

    budget = 2 * pool[0].tokens + 30  # two turns, the header and a date line
    text, placed = cm._render([], [], reading(), budget, "en", WHEN, unread=pool)
    assert len(placed) == 2 and text.count("Ana: word") == 2 and read == [0, 1]

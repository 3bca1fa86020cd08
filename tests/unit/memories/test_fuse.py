"""Rank fusion, diversity, and the memory token budget."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.memories.fuse import mmr, pack_memories, rrf


def test_rrf_rewards_agreement_between_rankings() -> None:
    vector = ["a", "b", "c"]
    lexical = ["c", "b", "d"]
    fused = rrf([vector, lexical], k=60)
    order = [item for item, _ in fused]
    assert set(order[:2]) == {"b", "c"}  # in both lists: above "a", a single first place
    assert order[2:] == ["a", "d"]
    assert dict(fused)["b"] == pytest.approx(2 / 62)
    assert {item for item, _ in fused} == {"a", "b", "c", "d"}


def test_rrf_ties_keep_first_seen_order_and_duplicates_count_once() -> None:
    fused = rrf([["x", "y"], ["y", "x"]])
    assert [item for item, _ in fused] == ["x", "y"]
    assert dict(rrf([["a", "a", "b"]]))["a"] == pytest.approx(1 / 61)
    assert rrf([]) == []


def unit(angle: float) -> list[float]:
    return [math.cos(angle), math.sin(angle)]


def test_mmr_prefers_a_diverse_second_pick() -> None:
    candidates = [
        ("seat-1", unit(0.0), 0.90),
        ("seat-2", unit(0.01), 0.89),  # near-duplicate of seat-1
        ("allergy", unit(1.5), 0.80),
    ]
    assert mmr(candidates, lambda_=0.7, top_k=2) == ["seat-1", "allergy"]
    # λ = 1 is plain relevance order.
    assert mmr(candidates, lambda_=1.0, top_k=2) == ["seat-1", "seat-2"]


def test_mmr_bounds() -> None:
    candidates = [("a", unit(0), 0.5), ("b", unit(1), 0.4)]
    assert mmr(candidates, top_k=5) == ["a", "b"]
    assert mmr(candidates, top_k=0) == []
    assert mmr([], top_k=3) == []


def test_pack_keeps_rank_order_within_budget() -> None:
    items = ["a" * 10, "b" * 300, "c" * 200, "d" * 50]
    packed = pack_memories(items, budget_tokens=400, count=len)
    # "c" does not fit after "b"; the smaller "d" still does.
    assert packed == ["a" * 10, "b" * 300, "d" * 50]
    assert sum(map(len, packed)) <= 400


def test_pack_default_budget_and_oversized_items() -> None:
    assert pack_memories(["x" * 401, "y"], count=len) == ["y"]
    assert pack_memories([], count=len) == []


def test_mmr_by_prefers_a_different_item_over_a_near_duplicate() -> None:
    from app.memories.fuse import mmr_by

    words = {"a": {"red", "kayak", "lake"}, "b": {"red", "kayak", "lake", "boat"}, "c": {"piano"}}

    def similarity(x: str, y: str) -> float:
        return len(words[x] & words[y]) / len(words[x] | words[y])

    ranked = [("a", 1.0), ("b", 0.95), ("c", 0.7)]
    assert mmr_by(ranked, similarity=similarity, lambda_=0.6, top_k=3) == ["a", "c", "b"]
    assert mmr_by(ranked, similarity=similarity, lambda_=1.0, top_k=2) == ["a", "b"]


def test_mmr_by_stops_after_the_pick_that_fills_and_keeps_its_order_up_to_there() -> None:
    from app.memories.fuse import mmr_by

    words = {"a": {"red", "kayak"}, "b": {"red", "kayak", "boat"}, "c": {"piano"}, "d": {"tea"}}

    def similarity(x: str, y: str) -> float:
        return len(words[x] & words[y]) / len(words[x] | words[y])

    ranked = [("a", 1.0), ("b", 0.95), ("c", 0.7), ("d", 0.6)]
    full = mmr_by(ranked, similarity=similarity, lambda_=0.6, top_k=4)
    tokens = {"a": 30, "b": 30, "c": 50, "d": 10}
    spent = 0

    def filled(pick: str) -> bool:
        nonlocal spent
        spent += tokens[pick]
        return spent >= 80

    early = mmr_by(ranked, similarity=similarity, lambda_=0.6, top_k=4, stop_after=filled)
    assert early == full[:2] == ["a", "c"]


_WORD = st.sampled_from(["red", "kayak", "lake", "boat", "piano", "tea", "may", "trip", "the"])


@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 0.2, 0.5, 0.7, 0.9, 1.0]), st.sets(_WORD, max_size=6)),
        max_size=12,
    ),
    st.booleans(),
    st.sampled_from([0.0, 0.5, 0.8, 1.0]),
    st.integers(0, 13),
    st.integers(1, 40),
)
def test_mmr_words_picks_what_mmr_by_with_jaccard_picks(
    items: list[tuple[float, set[str]]], best_first: bool, lambda_: float, top_k: int, fill: int
) -> None:
    """Candidates best first (where it stops scanning early) or in any order, equal
    relevances and equal gains included: the same picks in the same order."""
    from itertools import islice

    from app.memories.fuse import mmr_by, mmr_words

    if best_first:
        items = sorted(items, key=lambda item: -item[0])
    words = {i: ws for i, (_, ws) in enumerate(items)}

    def jaccard(x: int, y: int) -> float:
        union = len(words[x] | words[y])
        return len(words[x] & words[y]) / union if union else 0.0

    def stop_at(limit: int) -> Callable[[int], bool]:
        spent = 0

        def filled(pick: int) -> bool:
            nonlocal spent
            spent += len(words[pick]) + 1
            return spent >= limit

        return filled

    ranked = [(i, relevance) for i, (relevance, _) in enumerate(items)]
    expected = mmr_by(
        ranked, similarity=jaccard, lambda_=lambda_, top_k=top_k, stop_after=stop_at(fill)
    )
    got = list(
        mmr_words(
            ranked, words=words.__getitem__, lambda_=lambda_, top_k=top_k, stop_after=stop_at(fill)
        )
    )
    assert got == expected
    # Read lazily and left part way: the first picks of the same order.
    lazily = mmr_words(
        ranked, words=words.__getitem__, lambda_=lambda_, top_k=top_k, stop_after=stop_at(fill)
    )
    assert list(islice(lazily, top_k // 2)) == expected[: top_k // 2]


def test_mmr_words_reads_the_words_only_of_candidates_it_may_pick() -> None:
    """Best first, a candidate far below the best (its relevance alone cannot beat the
    gain of one already scanned) is never read."""
    from app.memories.fuse import mmr_words

    words = {"a": {"red", "kayak"}, "b": {"red", "kayak", "boat"}, "c": {"piano"}, "z": {"tea"}}
    read: list[str] = []

    def reading(key: str) -> set[str]:
        read.append(key)
        return words[key]

    ranked = [("a", 1.0), ("b", 0.95), ("c", 0.9), ("z", 0.1)]
    assert list(mmr_words(ranked, words=reading, lambda_=0.8, top_k=3)) == ["a", "c", "b"]
    assert "z" not in read


def test_mmr_words_makes_each_pick_when_it_is_asked_for() -> None:
    """The first picks, asked for one by one, are the first of the whole order, and
    only the words those picks needed are read."""
    from itertools import islice

    from app.memories.fuse import mmr_words

    words = {"a": {"red", "kayak"}, "b": {"red", "kayak", "boat"}, "c": {"piano"}, "d": {"tea"}}
    read: list[str] = []

    def reading(key: str) -> set[str]:
        read.append(key)
        return words[key]

    ranked = [("a", 1.0), ("b", 0.95), ("c", 0.9), ("d", 0.85)]
    picks = mmr_words(ranked, words=reading, lambda_=0.8, top_k=4)
    assert next(picks) == "a"
    assert read == []  # the first pick compares nothing
    whole = list(mmr_words(ranked, words=words.__getitem__, lambda_=0.8, top_k=4))
    assert [whole[0], *islice(picks, 1)] == whole[:2]
    assert "d" not in read  # not reached before the second pick
    assert [*whole[:2], *picks] == whole

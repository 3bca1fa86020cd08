"""Combining and trimming retrieval results: RRF, MMR, and a token-budgeted pack."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from app.memories.vectors import cosine

T = TypeVar("T")

DEFAULT_MEMORY_BUDGET_TOKENS = 400


def rrf(rankings: Sequence[Sequence[str]], k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: ``score(id) = Σ 1 / (k + rank)`` over the rankings.

    RRF uses ranks only, so a cosine ranking and a term-overlap ranking (whose
    scores live on unrelated scales) fuse without calibration. Ties keep the
    order in which ids were first seen; a repeated id counts once per ranking.
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


def mmr(
    candidates: Sequence[tuple[str, list[float], float]],
    *,
    lambda_: float = 0.7,
    top_k: int,
) -> list[str]:
    """Maximal marginal relevance over ``(id, unit vector, relevance)`` candidates.

    Greedy: each pick maximises ``λ·relevance − (1−λ)·max cosine to the picks so
    far``, so three paraphrases of one preference do not crowd out the allergy.
    Relevance should be on a cosine-like [0, 1] scale; ties keep input order.
    """
    remaining = list(candidates)
    picked: list[tuple[str, list[float], float]] = []
    while remaining and len(picked) < top_k:

        def gain(candidate: tuple[str, list[float], float]) -> float:
            redundancy = max((cosine(candidate[1], p[1]) for p in picked), default=0.0)
            return lambda_ * candidate[2] - (1.0 - lambda_) * redundancy

        best = max(remaining, key=gain)  # max() returns the first of equals
        picked.append(best)
        remaining.remove(best)
    return [item[0] for item in picked]


K = TypeVar("K")


def mmr_by(
    candidates: Sequence[tuple[K, float]],
    *,
    similarity: Callable[[K, K], float],
    lambda_: float = 0.7,
    top_k: int,
    stop_after: Callable[[K], bool] | None = None,
) -> list[K]:
    """Maximal marginal relevance over ``(id, relevance)`` with any ``similarity``.

    The same greedy choice as ``mmr``, keeping each candidate's largest similarity
    to the picks so far up to date (one similarity per pair): ``O(n²)``, not ``O(n³)``.
    ``stop_after(pick)`` returning true ends the choice early (e.g. once the picks
    fill a budget: each pick is the same as in the full order, only fewer are made).
    """
    remaining = list(candidates)
    redundancy = [0.0] * len(remaining)
    picked: list[K] = []
    while remaining and len(picked) < top_k:
        gains = [
            lambda_ * relevance - (1.0 - lambda_) * redundant
            for (_, relevance), redundant in zip(remaining, redundancy, strict=True)
        ]
        best = gains.index(max(gains))  # the first of equals
        chosen = remaining.pop(best)[0]
        redundancy.pop(best)
        picked.append(chosen)
        if stop_after is not None and stop_after(chosen):
            break
        for i, (item, _) in enumerate(remaining):
            redundancy[i] = max(redundancy[i], similarity(item, chosen))
    return picked


def mmr_words(
    candidates: Sequence[tuple[K, float, set[str]]],
    *,
    lambda_: float = 0.7,
    top_k: int,
    stop_after: Callable[[K], bool] | None = None,
) -> list[K]:
    """``mmr_by`` over ``(id, relevance, words)`` with the Jaccard similarity of the
    candidates' word sets: the same picks, in the same order, for a fraction of the cost.

    Each candidate's words become the bits of one integer, so a similarity is two
    popcounts, not two set operations; only the words that two or more candidates hold
    get a bit (a word of one candidate is never shared, and it counts in the union
    through the set's size alone), which keeps the integers short and their sums cheap.
    The similarities of the candidates left to the newest pick are computed in one loop
    here, not through a callback per pair."""
    seen: set[str] = set()
    shared_words: set[str] = set()
    for _, _, words in candidates:
        shared_words |= words & seen
        seen |= words
    bit = {w: 1 << i for i, w in enumerate(shared_words)}
    remaining = [
        (key, relevance, sum(map(bit.__getitem__, words & shared_words)), len(words))
        for key, relevance, words in candidates
    ]
    redundancy = [0.0] * len(remaining)
    picked: list[K] = []
    keep = 1.0 - lambda_
    while remaining and len(picked) < top_k:
        gains = [
            lambda_ * relevance - keep * redundant
            for (_, relevance, _, _), redundant in zip(remaining, redundancy, strict=True)
        ]
        best = gains.index(max(gains))  # the first of equals
        chosen, _, chosen_bits, chosen_size = remaining.pop(best)
        redundancy.pop(best)
        picked.append(chosen)
        if stop_after is not None and stop_after(chosen):
            break
        for i, (_, _, bits, size) in enumerate(remaining):
            shared = (bits & chosen_bits).bit_count()
            union = size + chosen_size - shared
            similarity = shared / union if union else 0.0
            if similarity > redundancy[i]:
                redundancy[i] = similarity
    return picked


def pack_memories(
    items: Sequence[T],
    *,
    budget_tokens: int = DEFAULT_MEMORY_BUDGET_TOKENS,
    count: Callable[[T], int],
) -> list[T]:
    """The items, in rank order, that fit in ``budget_tokens``.

    An item too large for what is left is skipped rather than ending the pack:
    one long episode must not hide the short high-stakes fact ranked after it.
    """
    packed: list[T] = []
    left = budget_tokens
    for item in items:
        cost = count(item)
        if cost <= left:
            packed.append(item)
            left -= cost
    return packed

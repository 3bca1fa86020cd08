"""Combining and trimming retrieval results: RRF, MMR, and a token-budgeted pack."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
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
    candidates: Sequence[tuple[K, float]],
    *,
    words: Callable[[K], frozenset[str] | set[str]],
    lambda_: float = 0.7,
    top_k: int,
    stop_after: Callable[[K], bool] | None = None,
) -> Iterator[K]:
    """``mmr_by`` over ``(id, relevance)`` with the Jaccard similarity of the candidates'
    ``words``: the same picks in the same order, reading only the words it needs.

    A candidate's gain is at most ``lambda_ * relevance`` (its redundancy is never
    negative). When the candidates come best first, the scan for each pick stops at the
    first one whose relevance cannot beat the best gain found so far: no later one can
    (nor tie it: the first of equals wins, as in ``mmr_by``). A candidate's redundancy
    is brought up to date with the picks made since it was last scanned, and its words
    are read the first time it is: the long tail of a deep candidate list, which MMR
    never reaches, costs nothing. (Any other order is scanned whole.) The words read
    become the bits of one integer per candidate (a bit per word, given as words are
    first seen), so a similarity is two popcounts, not two set operations. The state is
    kept per position in flat lists (it runs on every context read). Each pick is made
    when it is asked for: a caller that needs only the first few picks (a context read
    whose later picks fall below its floor) pays for those alone."""
    keys = [key for key, _ in candidates]
    ceiling = [lambda_ * relevance for _, relevance in candidates]  # the most each can gain
    best_first = all(a >= b for a, b in pairwise(relevance for _, relevance in candidates))
    keep = 1.0 - lambda_
    redundancy = [0.0] * len(keys)
    seen = [0] * len(keys)  # the picks each candidate's redundancy has been compared with
    own = [0] * len(keys)  # its words' bits,
    size = [-1] * len(keys)  # and how many words (-1: not read yet)
    bit: dict[str, int] = {}
    compared: list[tuple[int, int]] = []  # the picks' bits and word counts
    remaining = list(range(len(keys)))
    picks = 0

    def learn(i: int) -> None:
        read = words(keys[i])
        for word in read.difference(bit):
            bit[word] = 1 << len(bit)
        own[i], size[i] = sum(map(bit.__getitem__, read)), len(read)

    while remaining and picks < top_k:
        best, best_gain = -1, 0.0
        for position, i in enumerate(remaining):
            if best >= 0 and best_first and ceiling[i] <= best_gain:
                break
            redundant = redundancy[i]
            if seen[i] < len(compared):
                if size[i] < 0:
                    learn(i)
                mine, count = own[i], size[i]
                for pick, pick_size in compared[seen[i] :]:
                    shared = (mine & pick).bit_count()
                    union = count + pick_size - shared
                    similarity = shared / union if union else 0.0
                    if similarity > redundant:
                        redundant = similarity
                redundancy[i], seen[i] = redundant, len(compared)
            gain = ceiling[i] - keep * redundant
            if best < 0 or gain > best_gain:  # the first of equals
                best, best_gain = position, gain
        chosen = remaining.pop(best)
        picks += 1
        yield keys[chosen]
        if stop_after is not None and stop_after(keys[chosen]):
            return
        if size[chosen] < 0:
            learn(chosen)
        compared.append((own[chosen], size[chosen]))


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

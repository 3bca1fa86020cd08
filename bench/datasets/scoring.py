"""From ranked results to figures: evidence recall@k, answer presence, summaries.

Definitions (docs/benchmarks-datasets.md repeats them):

* A result is one retrieved item with its provenance: the dataset turn ids and
  the sessions it comes from (a Mnemo episode covers several turns; a baseline
  result is one raw turn).
* **turn recall@k** of a question = |evidence turns ∩ turns of the top-k results|
  / |evidence turns|; **session recall@k** likewise with sessions. Questions with
  no evidence of that kind are left out of that figure. A category's figure is
  the mean over its questions.
* **recall at equal characters**: a baseline's results taken in rank order until
  they hold as many characters as Mnemo's top-k for the same question, so that
  "an episode covers several turns" is not mistaken for better ranking.
* **answer presence**: the normalised answer string occurs in the normalised
  context (NFKC, lower case, punctuation → space, spaces collapsed).
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.datasets.model import Question

_PUNCT = re.compile(r"[^\w\s]|_")


@dataclass(frozen=True)
class Hit:
    """One ranked result, reduced to what scoring needs."""

    turn_ids: tuple[str, ...]
    session_ids: tuple[str, ...]
    text: str


def covered(hits: Sequence[Hit], k: int) -> tuple[set[str], set[str]]:
    turns: set[str] = set()
    sessions: set[str] = set()
    for hit in hits[:k]:
        turns.update(hit.turn_ids)
        sessions.update(hit.session_ids)
    return turns, sessions


def recall(evidence: frozenset[str] | set[str], found: set[str]) -> float | None:
    """Share of ``evidence`` in ``found``; None when there is no evidence to find."""
    if not evidence:
        return None
    return len(evidence & found) / len(evidence)


def prefix_by_chars(hits: Sequence[Hit], chars: int) -> int:
    """How many leading hits it takes to hold ``chars`` characters (at least one)."""
    total = 0
    for i, hit in enumerate(hits, start=1):
        total += len(hit.text)
        if total >= chars:
            return i
    return len(hits)


def question_scores(
    question: Question,
    hits: Sequence[Hit],
    ks: Sequence[int],
    *,
    equal_chars: int | None = None,
) -> dict[str, float | None]:
    """turn_r@k and session_r@k for each k (and turn_r@chars when ``equal_chars``)."""
    out: dict[str, float | None] = {}
    for k in ks:
        turns, sessions = covered(hits, k)
        out[f"turn_r@{k}"] = recall(question.evidence_turns, turns)
        out[f"session_r@{k}"] = recall(question.evidence_sessions, sessions)
    if equal_chars is not None:
        n = prefix_by_chars(hits, equal_chars)
        turns, sessions = covered(hits, n)
        out["turn_r@chars"] = recall(question.evidence_turns, turns)
        out["session_r@chars"] = recall(question.evidence_sessions, sessions)
    return out


def chars_of(hits: Sequence[Hit], k: int) -> int:
    return sum(len(h.text) for h in hits[:k])


# --------------------------------------------------------------------------- answers


def normalise_text(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).lower()
    return " ".join(_PUNCT.sub(" ", folded).split())


def answer_present(answer: str | None, context: str) -> bool | None:
    """Whether the answer string is in the context; None when there is no answer."""
    if answer is None:
        return None
    needle = normalise_text(answer)
    if not needle:
        return None
    haystack = normalise_text(context)
    if needle.isascii():
        # Whole words: "10" must not match inside "2010".
        return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack) is not None
    return needle in haystack


# --------------------------------------------------------------------------- summaries


def mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.fmean(kept), 4) if kept else None


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0–100)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[rank - 1])


def by_category(
    rows: Sequence[Mapping[str, Any]],
    metrics: Sequence[str],
    *,
    groups: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Mean of each metric per category, plus named groups of categories and 'all'.

    ``rows`` carry ``category`` and the metric values (None = not applicable).
    """
    buckets: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        buckets[str(row["category"])].append(row)
    named: dict[str, list[Mapping[str, Any]]] = dict(sorted(buckets.items()))
    for name, categories in (groups or {}).items():
        named[name] = [r for r in rows if str(r["category"]) in set(categories)]
    named["all"] = list(rows)
    out: dict[str, dict[str, Any]] = {}
    for name, selected in named.items():
        figures: dict[str, Any] = {"n": len(selected)}
        for metric in metrics:
            figures[metric] = mean(r.get(metric) for r in selected)
        out[name] = figures
    return out


# --------------------------------------------------------------------------- evidence in a context

# An evidence turn is "present" in a context when this share of its word trigrams
# occurs there: its text survives whole, or with a few words added (a date beside
# "yesterday") or lost at one edge; a turn cut to its tail or first half does not
# count. Turns shorter than three words must occur as a whole phrase.
PRESENT_SHARE = 0.8


def _grams(words: Sequence[str], n: int = 3) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass
class ContextText:
    """A context normalised once, for many evidence checks."""

    text: str

    def __post_init__(self) -> None:
        self.normal = normalise_text(self.text)
        self.grams = _grams(self.normal.split())

    def holds(self, turn_text: str) -> bool:
        words = normalise_text(turn_text).split()
        if not words:
            return False
        if len(words) < 3:
            return re.search(rf"(?<!\S){re.escape(' '.join(words))}(?!\S)", self.normal) is not None
        grams = _grams(words)
        return len(grams & self.grams) >= PRESENT_SHARE * len(grams)


def evidence_present(
    evidence: Iterable[str], turn_texts: Mapping[str, str], context: ContextText
) -> float | None:
    """Share of the evidence turns (by dataset id) whose text is in ``context``."""
    ids = [e for e in evidence if turn_texts.get(e)]
    if not ids:
        return None
    return sum(context.holds(turn_texts[e]) for e in ids) / len(ids)

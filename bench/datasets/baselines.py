"""Baselines over a user's raw turns: BM25 and dense retrieval with Mnemo's embedder.

Both rank single turns (no chunking, no fusion), so they show what Mnemo's
episodes and hybrid ranking add over the obvious alternatives.

* BM25 (Okapi, k1 = 1.2, b = 0.75, Lucene's smoothed idf) over tokens: runs of
  letters/digits, lower-cased after NFKC, plus CJK character bigrams (a lone
  CJK character is its own token). No stop words, no stemming.
* Dense: every raw turn embedded with ``USEEmbedder`` (the model the service
  uses), cosine to the embedded question.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"(?P<cjk>[{_CJK_CHARS}]+)|(?P<word>(?:(?![{_CJK_CHARS}])[^\W_])+)")


def tokens(text: str) -> list[str]:
    """Word tokens and CJK bigrams of ``text``, in order, with repeats."""
    out: list[str] = []
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text).lower()):
        value = match.group()
        if match.lastgroup == "cjk":
            out.extend(
                [value] if len(value) == 1 else [value[i : i + 2] for i in range(len(value) - 1)]
            )
        else:
            # A word glued to CJK ("用python写") ends where the CJK run begins.
            out.append(value)
    return out


@dataclass
class BM25:
    """An in-memory BM25 index over ``docs``; ``top(query, k)`` returns doc indexes."""

    docs: Sequence[str]
    k1: float = 1.2
    b: float = 0.75

    def __post_init__(self) -> None:
        self._tf = [Counter(tokens(d)) for d in self.docs]
        self._len = [sum(tf.values()) for tf in self._tf]
        self._avg = (sum(self._len) / len(self._len)) if self._len else 0.0
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        n = len(self.docs)
        self._idf = {t: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self._postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self._tf):
            for term in tf:
                self._postings.setdefault(term, []).append(i)

    def scores(self, query: str) -> dict[int, float]:
        out: dict[int, float] = {}
        for term in set(tokens(query)):
            idf = self._idf.get(term)
            if idf is None:
                continue
            for i in self._postings[term]:
                tf = self._tf[i][term]
                norm = self.k1 * (1 - self.b + self.b * self._len[i] / (self._avg or 1.0))
                out[i] = out.get(i, 0.0) + idf * tf * (self.k1 + 1) / (tf + norm)
        return out

    def top(self, query: str, k: int) -> list[int]:
        scored = self.scores(query)
        # Ties: earlier turn first, so the order is deterministic.
        return sorted(scored, key=lambda i: (-scored[i], i))[:k]


class DenseIndex:
    """Unit vectors of ``docs`` (one matrix); ``top(query_vector, k)`` by cosine."""

    def __init__(self, vectors: Sequence[Sequence[float]]) -> None:
        matrix = np.asarray(vectors, dtype=np.float32)
        self._matrix = matrix.reshape(len(vectors), -1) if len(vectors) else matrix

    def top(self, query_vector: Sequence[float], k: int) -> list[int]:
        if not len(self._matrix):
            return []
        sims = self._matrix @ np.asarray(query_vector, dtype=np.float32)
        k = min(k, len(sims))
        best = np.argpartition(-sims, k - 1)[:k]
        return [int(i) for i in sorted(best, key=lambda i: (-float(sims[i]), int(i)))]

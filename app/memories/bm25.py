"""Terms for the BM25 leg of memory search: stemmed English, repeats kept.

``memories.terms`` holds these (GIN indexed): every occurrence of every term,
so the SQL in ``stores/memories.LEXICAL`` can compute BM25's term frequency (occurrences
of the term in the row), document length (``cardinality(terms)``) and document
frequency. Terms come from ``lexical.lexical_terms`` (CJK bigrams, identifiers
whole and split, English stop words out); plain English words are then stemmed
by a small suffix stripper, so "paintings", "painted" and "painting" meet.

The stemmer is deliberately conservative (plural and verb endings, a final
"e", doubled consonants): equal stems for a word's inflections matter, exact
linguistic stems do not — queries and memories go through the same function.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from itertools import pairwise

from app.memories.lexical import lexical_terms

MAX_QUERY_TERMS = 32
_PLAIN_WORD = re.compile(r"[a-z]+")
_VOWEL = re.compile(r"[aeiouy]")
_DOUBLE_OK = frozenset("lsz")


def stem(word: str) -> str:
    """An English word's stem: ``"paintings"`` → ``"paint"``, ``"hiking"`` and ``"hike"`` →
    ``"hik"``, ``"tried"`` → ``"try"``. Other terms (ids, numbers, CJK) come back as they are."""
    if len(word) < 4 or not _PLAIN_WORD.fullmatch(word):
        return word
    w = word
    if w.endswith("ies") or w.endswith("ied"):
        w = w[:-3] + "y" if len(w) > 4 else w[:-1]
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and _VOWEL.search(w[: -len(suffix)]):
            w = w[: -len(suffix)]
            if len(w) >= 4 and w[-1] == w[-2] and w[-1] not in _DOUBLE_OK and w[-1] not in "aeiou":
                w = w[:-1]
            break
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    return w


# Pieces (whitespace-separated) up to this long have their terms kept, per process:
# words recur across memories, queries and turns, and reading one costs ~5 µs
# (normalising, the token regex, stop words, the stemmer) against a lookup's 0.1.
PIECE_KEPT_MAX_CHARS = 48
PIECES_KEPT = 32_768


@functools.lru_cache(maxsize=PIECES_KEPT)
def _piece_terms(piece: str) -> tuple[str, ...]:
    return tuple(stem(t) for t in lexical_terms(piece))


def index_terms(text: str) -> list[str]:
    """Every term occurrence of ``text``, stemmed, in order (repeats kept)."""
    out: list[str] = []
    for piece in text.split():
        if len(piece) <= PIECE_KEPT_MAX_CHARS:
            out.extend(_piece_terms(piece))
        else:
            out.extend(stem(t) for t in lexical_terms(piece))
    return out


def search_terms(text: str, *, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """A query's distinct terms, as ``index_terms`` writes them; capped (a pasted
    document must not turn the GIN lookup into a scan of every memory)."""
    return list(dict.fromkeys(index_terms(text)))[:max_terms]


def term_matcher(terms: Sequence[str]) -> Callable[[str], int]:
    """How many of a query's search ``terms`` (``search_terms(query)``) a text contains,
    fast enough for every turn of every candidate episode on the /context path: an
    English stem counting where it starts a word ("paint" in "Painting"), a CJK bigram
    or an identifier wherever it occurs. An approximation of ``index_terms`` (a stem
    also starts longer words), used to share an episode's score among its turns. Where
    several stems start the same word, only the first of ``terms`` counts there."""
    words = [t for t in terms if _PLAIN_WORD.fullmatch(t)]
    others = [t for t in terms if not _PLAIN_WORD.fullmatch(t)]
    starts = (
        functools.partial(_starts_a_word, words)
        if _prefix_free(words)
        else _first_at_word_starts(words)
    )

    def count(text: str) -> int:
        folded = text.lower()
        return starts(folded) + sum(t in folded for t in others)

    return count


def _prefix_free(words: Sequence[str]) -> bool:
    """No word starts another: then at most one of them can start any word of a text."""
    ordered = sorted(words)
    return not any(b.startswith(a) for a, b in pairwise(ordered))


def _starts_a_word(words: Sequence[str], folded: str) -> int:
    """How many of ``words`` start a word of ``folded`` somewhere: each searched by
    itself (no regex to compile per query, ~0.2 ms), stopping at its first occurrence
    that starts a word (what re's \\b tests: the start, or no word character before it:
    a letter, digit or underscore, as ``str.isalnum``)."""
    n = 0
    for word in words:
        at = folded.find(word)
        while at > 0 and (folded[at - 1].isalnum() or folded[at - 1] == "_"):
            at = folded.find(word, at + 1)
        if at >= 0:
            n += 1
    return n


def _first_at_word_starts(words: Sequence[str]) -> Callable[[str], int]:
    """For words of which one starts another: at each word start only the first of them
    that fits counts (regex alternation), as the search of each by itself cannot tell."""
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + ")")

    def starts(folded: str) -> int:
        return len(set(pattern.findall(folded)))

    return starts

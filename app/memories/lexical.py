"""Lexical terms for memory search, for Chinese and English alike.

Postgres full-text search has no Chinese parser we can count on (zhparser is an
extension nobody ships), so memories store ``terms text[]`` computed here, GIN
indexed, and the read path asks ``terms && :query_terms`` and ranks by overlap.

* Latin text: NFKC + lowercase words; identifiers survive whole (``qx7t2l``,
  ``order-123``, ``a.b@example.com``, ``3.5``) and compound ids also yield their
  parts so "order 123" still meets "order-123".
* CJK text has no spaces, so runs are cut into character bigrams (the standard
  trick of CJK search engines); a run of one character yields that character.
  Function words split runs first, so "我的座位" yields "座位", not "的座".
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

_CJK_CLASS = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(
    # An email starts where its run of address characters starts (else a long run
    # without "@" is re-scanned from each of its positions).
    r"(?P<email>(?<![a-z0-9._%+\-])[a-z0-9._%+\-]++@[a-z0-9\-]++(?:\.[a-z0-9\-]++)+)"
    rf"|(?P<cjk>[{_CJK_CLASS}]+)"
    # A word: letters/digits of any non-CJK script, joined by - _ . / ' inside.
    rf"|(?P<word>[^\W_{_CJK_CLASS}]++(?:[\-_./'][^\W_{_CJK_CLASS}]++)*+)"
)
_COMPOUND_SPLIT = re.compile(r"[\-_./]")
_NUMBER = re.compile(r"[\d.]+")

EN_STOPWORDS = frozenset(
    """
    a about above after again all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into
    is it its itself just let me more most my myself of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself
    yourselves i'm i've i'd i'll you're it's that's what's there's let's s t ok okay please
    also get got would've shall may might must
    """.split()
)

# Multi-character function words are blanked first, then runs are split at
# single-character particles and pronouns (not 过 or 着: 过敏, 过道, 着急).
# Negators (不, 没) stay: "不吃辣" and "吃辣" should share 吃辣 but not be equal.
ZH_STOP_PHRASES = tuple(
    sorted(
        """
        我们 你们 他们 她们 它们 咱们 自己 什么 怎么 怎样 为什么 这个 那个 这些 那些 这样 那样
        一个 一下 一些 可以 因为 所以 但是 还是 如果 就是 已经 还有 然后 而且 或者 以及 关于
        请问 一直 的话 是不是 有没有 现在 刚才
        """.split(),
        key=len,
        reverse=True,
    )
)
ZH_STOP_CHARS = frozenset("的了吗呢吧啊呀嘛哦嗯是我你他她它这那个和与及也都就很在把被给请对")

_ZH_STOP_PHRASE_RE = re.compile("|".join(map(re.escape, ZH_STOP_PHRASES)))
_ZH_SPLIT_RE = re.compile("[" + re.escape("".join(sorted(ZH_STOP_CHARS))) + "]+")


def normalize(text: str) -> str:
    """NFKC (full-width → ASCII, compatibility forms) and lowercase."""
    return unicodedata.normalize("NFKC", text).lower()


def _word_terms(word: str) -> Iterable[str]:
    word = word.strip("'")
    if word.endswith("'s"):
        word = word[:-2]
    if not word or word in EN_STOPWORDS:
        return
    yield word
    if _NUMBER.fullmatch(word):
        return  # 3.5 is one term, not "3" and "5"
    parts = [p for p in _COMPOUND_SPLIT.split(word) if p]
    if len(parts) > 1:
        yield from (p for p in parts if p not in EN_STOPWORDS)


def _cjk_terms(run: str) -> Iterable[str]:
    for piece in _ZH_SPLIT_RE.split(_ZH_STOP_PHRASE_RE.sub(" ", run)):
        for segment in piece.split():
            if len(segment) == 1:
                yield segment
            else:
                yield from (segment[i : i + 2] for i in range(len(segment) - 1))


def lexical_terms(text: str) -> list[str]:
    """Distinct search terms of ``text``, in order of first appearance."""
    seen: dict[str, None] = {}
    for match in _TOKEN.finditer(normalize(text)):
        kind, value = match.lastgroup, match.group()
        if kind == "email":
            terms: Iterable[str] = (value,)
        elif kind == "cjk":
            terms = _cjk_terms(value)
        else:
            terms = _word_terms(value)
        for term in terms:
            seen.setdefault(term, None)
    return list(seen)


def query_terms(text: str, *, max_terms: int = 32) -> list[str]:
    """Terms to bind as ``:terms`` in ``WHERE terms && :terms`` (a GIN lookup).

    Capped so a pasted document cannot turn the lookup into a scan of every
    memory; the first terms are kept because a user's question leads with them.
    """
    return lexical_terms(text)[:max_terms]


def idf(doc_freq: Mapping[str, int], n_docs: int) -> dict[str, float]:
    """BM25's smoothed inverse document frequency (always > 0)."""
    return {t: math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)) for t, df in doc_freq.items()}


def overlap_score(
    query_terms: Sequence[str],
    doc_terms: Iterable[str],
    idf: Mapping[str, float] | None = None,
) -> float:
    """Share of the query's (idf-weighted) terms that the document contains, in [0, 1].

    With no idf every term weighs 1, so this ranks exactly like the overlap count
    of ``terms && …``; unknown terms get the largest known weight (rare = telling).
    """
    query = set(query_terms)
    if not query:
        return 0.0
    default = max(idf.values(), default=1.0) if idf else 1.0

    def weight(term: str) -> float:
        return idf.get(term, default) if idf else 1.0

    total = sum(weight(t) for t in query)
    hit = sum(weight(t) for t in query.intersection(doc_terms))
    return hit / total


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    sa, sb = set(a), set(b)
    return len(sa & sb) / len(sa | sb) if sa or sb else 0.0


def lexical_similarity(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' terms: a model-free ``similarity``."""
    return jaccard(lexical_terms(a), lexical_terms(b))

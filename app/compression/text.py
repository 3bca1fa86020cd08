"""Text normalisation shared by extraction, merging and rendering.

Dedup identity must not depend on spacing, width (全角/半角), case or
punctuation, so every key goes through ``normalize``: NFKC, casefold, then
everything that is not a letter or digit removed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Any, Literal

_NON_WORD = re.compile(r"[\W_]+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+(?:\.\d+)?")
_PARAM_PREFIX = re.compile(r"^(?:the|my|our|your|a|an)\s+", re.IGNORECASE)

# Words that carry no identity; dropping them lets "book the hotel" match
# "hotel booking" by what remains.
_STOPWORDS = frozenset(
    "a an the to of for in on at by with and or but is are be was were it this that "
    "i you we he she they me my our your please can could would should will just also "
    "do does did not no".split()
)
_MAX_KEY_CHARS = 64


def normalize(text: str) -> str:
    return _NON_WORD.sub("", unicodedata.normalize("NFKC", text).casefold())


def _bounded(prefix: str, body: str) -> str:
    # Long texts keep a readable head plus a digest, so keys stay short but unique.
    if len(body) > _MAX_KEY_CHARS:
        digest = hashlib.sha1(body.encode()).hexdigest()[:12]
        body = f"{body[:48]}~{digest}"
    return f"{prefix}:{body}"


def item_key(prefix: str, text: str) -> str:
    """The key of a state item (``prefix``: goal, constraint, todo…) by its wording."""
    return _bounded(prefix, normalize(text))


def param_key(name: str) -> str:
    return _bounded("param", normalize(_PARAM_PREFIX.sub("", name.strip())))


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def action_key(tool: str, arguments: dict[str, Any]) -> str:
    digest = hashlib.sha1(canonical_json(arguments).encode()).hexdigest()[:12]
    return f"action:{tool}:{digest}"


# Texts compared again and again (a state's items against each live withdrawal, on
# every context read and in every merge) are split into words once: a bounded cache
# of the shorter ones.
WORD_SET_CACHED_MAX_CHARS = 1_000


def word_set(text: str) -> frozenset[str]:
    """Latin words (minus stopwords) plus CJK character bigrams, for fuzzy overlap."""
    return _word_set_cached(text) if len(text) <= WORD_SET_CACHED_MAX_CHARS else _words(text)


@functools.lru_cache(maxsize=8192)
def _word_set_cached(text: str) -> frozenset[str]:
    return _words(text)


def _words(text: str) -> frozenset[str]:
    folded = unicodedata.normalize("NFKC", text).casefold()
    words = {w for w in _LATIN_WORD.findall(folded) if w not in _STOPWORDS}
    for run in _CJK_RUN.findall(folded):
        if len(run) == 1:
            words.add(run)
        words.update(run[i : i + 2] for i in range(len(run) - 1))
    return frozenset(words)


def containment(needle: str, haystack: str) -> float:
    """Share of ``needle``'s words found in ``haystack`` (0 when needle is empty)."""
    a = word_set(needle)
    if not a:
        return 0.0
    return len(a & word_set(haystack)) / len(a)


# Language-neutral tokens: JSON keys, and identifiers, numbers, dates, paths and
# URLs (anything with a digit, "_" or "/"), e.g. "search_hotels", "2026-05-14", "TP200".
_JSON_KEY = re.compile(r'"(?:[^"\\\n]{0,80})"\s*:')
# A token is taken whole from its first character (it holds a digit, "_" or "/"
# somewhere): starting inside a run would re-scan it from every position.
_NEUTRAL = re.compile(r"(?<![A-Za-z0-9_.\-/:@~])(?=[A-Za-z.\-:@~]*+[\d_/])[A-Za-z0-9_.\-/:@~]++")
_LATIN_ONLY = re.compile(r"[A-Za-z][A-Za-z'\-]*")


# Language is judged on a sample: the start of each text, and no more than this much
# in all. ``/context`` asks it of every pinned memory on every read.
SAMPLE_CHARS_PER_TEXT = 1_000
SAMPLE_CHARS = 20_000


def cjk_ratio(texts: Iterable[str]) -> float:
    """CJK characters over (CJK characters + Latin words): a word is roughly a character.

    JSON keys, numbers and identifiers are neither language, so tool output or a
    pasted config does not make a Chinese conversation look English. Only a
    bounded sample is read (``SAMPLE_CHARS_PER_TEXT`` of each, ``SAMPLE_CHARS``
    in all).
    """
    cjk = latin = 0
    budget = SAMPLE_CHARS
    for text in texts:
        if not text:
            continue
        if budget <= 0:
            break
        text = text[: min(SAMPLE_CHARS_PER_TEXT, budget)]
        budget -= len(text)
        if '":' in text or '" :' in text:
            text = _JSON_KEY.sub(" ", text)
        cjk += len(_CJK.findall(text))
        latin += len(_LATIN_ONLY.findall(_NEUTRAL.sub(" ", text)))
    total = cjk + latin
    return cjk / total if total else 0.0


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


ZH_RATIO = 0.4


def detect_language(texts: Iterable[str | None]) -> Literal["zh", "en"]:
    """ "zh" when CJK characters make up at least 40% of (CJK chars + Latin words)."""
    return "zh" if cjk_ratio(t for t in texts if t) >= ZH_RATIO else "en"

"""Whether a user turn deserves a memory lookup, and what to look up.

"ok", "谢谢" or a thumbs-up retrieve nothing useful and would put arbitrary
memories in front of the model; "那这个呢" retrieves nothing by itself, so it is
expanded with the turns it refers to.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from app.memories.lexical import normalize

# Whole replies made only of these are acknowledgements, greetings or laughter.
_ACKS_EN = [
    *(
        "ok okay okey k kk alright sure fine cool great nice good perfect awesome thanks thank "
        "thx ty tks cheers np gotcha understood yes yeah yep yup no nope nah lol lmao haha "
        "hahaha hehe hi hello hey bye goodbye wow oh ah hmm hm mm mhm right noted"
    ).split(),
    *("thank you", "thank u", "all right", "got it", "no problem", "sounds good", "will do"),
]
_ACKS_ZH = (
    "好的 好滴 好哒 好吧 好呀 好 行 可以 嗯 哦 噢 喔 哈 呵呵 嘿嘿 谢谢你 谢谢 多谢 感谢 谢了 收到 "
    "明白了 明白 知道了 了解 懂了 没问题 对的 对 是的 没事 不客气 你好 再见 拜拜 辛苦了"
).split()


def _alternative(phrase: str) -> str:
    body = r"\s+".join(map(re.escape, phrase.split()))
    # Latin acks must end at a word boundary: "ok" is not "okinawa", "no" not "now".
    return body + r"(?![a-z0-9])" if phrase.isascii() else body + "+"


_ACK_ONLY = re.compile(
    r"(?:(?:"
    + "|".join(_alternative(p) for p in sorted(_ACKS_EN + _ACKS_ZH, key=len, reverse=True))
    + r")\s*)+"
)
_ELONGATED = re.compile(r"(.)\1{2,}")  # "okkk", "thanksss"


def _words_only(text: str) -> str:
    """Letters and digits; everything else (punctuation, emoji, modifiers) → space."""
    kept = (c if unicodedata.category(c)[0] in "LN" else " " for c in normalize(text))
    return " ".join("".join(kept).split())


def needs_retrieval(query: str) -> bool:
    """False for an empty, emoji-only or acknowledgement-only turn; True otherwise."""
    words = _words_only(query)
    if not words:
        return False
    forms = {words, _ELONGATED.sub(r"\1", words), _ELONGATED.sub(r"\1\1", words)}
    return not any(_ACK_ONLY.fullmatch(form) for form in forms)


# --------------------------------------------------------------------------- expansion

# Words that point back at something said earlier. A short query with none of
# these ("my allergies?") is still expanded: short queries embed poorly.
_REFERENTIAL_EN = re.compile(
    r"\b(?:it|its|this|that|these|those|them|they|one|ones|other|others|another|there|"
    r"same|what about|how about|and the|the former|the latter|above|previous|earlier)\b"
)
_REFERENTIAL_ZH = re.compile(r"这个|那个|这些|那些|它|这|那|上面|刚才|之前|另一个|其他|呢")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_REFERENTIAL_MAX_CHARS = 40


def _effective_len(text: str) -> int:
    # A Chinese character carries about as much as a short English word, so it
    # counts double against ``min_chars``: "我对花生过敏吗" is not a short query.
    return len(text) + len(_CJK.findall(text))


def is_referential(query: str) -> bool:
    folded = normalize(query)
    if _effective_len(folded) > _REFERENTIAL_MAX_CHARS:
        return False
    return bool(_REFERENTIAL_EN.search(folded) or _REFERENTIAL_ZH.search(folded))


def build_query(
    latest_user: str,
    recent: Sequence[str],
    *,
    min_chars: int = 12,
    max_chars: int = 400,
    per_turn_chars: int = 160,
) -> str:
    """The text to embed and term-match for ``latest_user``.

    ``recent`` is the preceding turns, oldest first. A short or referential query
    is followed by those turns, most recent first (the referent is usually the
    last thing said), each clipped, until ``max_chars``.
    """
    query = " ".join(latest_user.split())
    if _effective_len(query) >= min_chars and not is_referential(query):
        return query
    parts = [query] if query else []
    size = len(query)
    for turn in reversed(recent):
        text = " ".join(turn.split())[:per_turn_chars]
        if not text:
            continue
        if size + len(text) + 1 > max_chars:
            text = text[: max(0, max_chars - size - 1)]
        if not text:
            break
        parts.append(text)
        size += len(text) + 1
    return "\n".join(parts)

"""An extractive summary of what fits no unit: a few key sentences per compression.

What was said, explained or reasoned about but is none of goal, rule, action,
parameter, decision… would otherwise be lost from the context until someone
retrieves it: "the house was built before 1970, so assume…", "另外周五封版，时间
很紧". Each compressed span contributes its most salient sentences that the units
do not already hold and whose words the state does not already carry (novelty),
attributed to their speaker, in the session's language. Tool output is never a
candidate: the ledger speaks for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.compression.extract.changes import reversal, value_change
from app.compression.extract.gates import Gated
from app.compression.extract.sentence import is_noise, is_social
from app.compression.ledger import tool_kind
from app.compression.state import ActionUnit, ParameterUnit, SummaryUnit, TaskState, Unit
from app.compression.text import clip, normalize, word_set
from app.core.turns import TurnView

MAX_SENTENCES = 3
SENTENCE_CHARS = 200
_MIN_SCORE = 2.0
# What makes a sentence worth keeping: figures and dates, obligations and limits,
# consequences, names and codes.
_FIGURE = re.compile(
    r"\d|(?<![一二三四五六七八九十百千两])[一二三四五六七八九十百千两]++[元万天周月年号日点]|周[一二三四五六日末]"
)
_WEIGHT = re.compile(
    r"\b(?:must|have to|has to|need to|only|never|always|deadline|by|before|until|because|so"
    r"|assume|required?|risk|important|critical|allerg\w*|legal|law|policy|regulat\w*)\b"
    r"|必须|一定|只能|不能|截止|之前必须|以内|因为|所以|关键|重要|风险|规定|合规|法规|期限|封版|上线|过敏|默认",
    re.IGNORECASE,
)
# Most sentences hold none of its words: they are not scanned for them (``gates``).
_WEIGHT_GATED = Gated(_WEIGHT)
_NAME = re.compile(r"(?<![\w-])[A-Z][A-Za-z0-9-]{2,}+|[A-Z]{2,}+[-_]?\d++")
_SOCIAL = re.compile(
    r"\b(?:thanks?|thank you|cheers|bye|haha|lol|weekend|weather|coffee|dog|cat|kids?)\b"
    r"|谢谢|哈哈|拜拜|回聊|周末愉快|天气|咖啡|猫|狗",
    re.IGNORECASE,
)
_SPEAKER = {
    "en": {"user": "User", "assistant": "Agent"},
    "zh": {"user": "用户", "assistant": "助手"},
}


def _score(sentence: str, stakes: int, known: frozenset[str]) -> float:
    """Salience (an obligation, limit or consequence, with figures and names) times
    novelty against the state; 0 for small talk and for sentences with no stake."""
    words = word_set(sentence)
    if not words or _SOCIAL.search(sentence) or is_social(sentence) or is_noise(sentence):
        return 0.0
    novelty = len(words - known) / len(words)
    salience = (
        2.0 * bool(_FIGURE.search(sentence))
        + 1.5 * stakes
        + 0.5 * min(3, len(_NAME.findall(sentence)))
    )
    return salience * (0.3 + novelty)


def _held(units: Sequence[Unit]) -> tuple[list[str], list[tuple[str, str]], set[str]]:
    """What the units already say: texts, (parameter name, value) pairs, and the
    argument values of read-only calls (a sentence naming one is browsing)."""
    texts: list[str] = []
    params: list[tuple[str, str]] = []
    browsed: set[str] = set()
    written: set[str] = set()
    for u in units:
        if isinstance(u, ParameterUnit):
            params.append((normalize(u.name), normalize(u.value)))
        elif isinstance(u, ActionUnit):
            values = {normalize(str(v)) for v in u.arguments.values() if _scalar(v)}
            (written if tool_kind(u) == "write" else browsed).update(
                v for v in values if len(v) >= 4
            )
        elif text := getattr(u, "text", None):
            texts.append(normalize(text))
    return texts, params, browsed - written


def _scalar(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _state_words(state: TaskState, units: Sequence[Unit]) -> frozenset[str]:
    texts = [getattr(u, "text", "") or "" for u in units]
    texts += [state.summary, state.goal.text if state.goal else ""]
    for pool in (state.constraints, state.high_stakes, state.decisions, state.facts):
        texts += [item.text for item in pool]
    return word_set(" ".join(texts))


def summary_unit(
    turns: Sequence[TurnView],
    sentences: Sequence[tuple[TurnView, str]],
    units: Sequence[Unit],
    state: TaskState,
    language: str,
) -> SummaryUnit | None:
    """The span's key sentences none of ``units`` holds, best first, or None."""
    held, params, browsed = _held(units)
    known = _state_words(state, units)
    scored = []
    for turn, sentence in sentences:
        # A sentence with no stake scores 0 whatever else holds: checked first, it
        # spares most sentences the comparisons with every unit below.
        stakes = len(_WEIGHT.findall(sentence)) if _WEIGHT_GATED.possible(sentence) else 0
        if not stakes:
            continue
        n = normalize(sentence)
        if len(n) < 8 or any(n in h or (h and h in n) for h in held):
            continue
        if any(value in n and (name in n or len(value) >= 4) for name, value in params):
            continue  # a parameter already holds it (and may have changed since)
        if any(value in n for value in browsed):
            continue  # side browsing: the ledger counts it
        if value_change(sentence) or reversal(sentence):
            continue  # a change of mind: the state records it as such
        score = _score(sentence, stakes, known)
        if score >= _MIN_SCORE:
            scored.append((score, turn.seq, turn.role, sentence))
    if not scored:
        return None
    best = sorted(scored, key=lambda s: (-s[0], s[1]))[:MAX_SENTENCES]
    speakers = _SPEAKER["zh" if language == "zh" else "en"]
    sep = "：" if language == "zh" else ": "
    parts = [
        f"{speakers.get(role, role)}{sep}{clip(text, SENTENCE_CHARS)}"
        for _, _, role, text in sorted(best, key=lambda s: s[1])
    ]
    seqs = sorted({seq for _, seq, _, _ in best})
    return SummaryUnit(text=" ".join(parts), source_seqs=seqs)

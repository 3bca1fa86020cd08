"""What a compressed session contributes to long-term memory, and how it merges.

Selection is conservative because a wrong long-term memory outlives the
session that produced it and is shown to every later one:

* high-stakes items (allergies, medical, payment…) always, as high-stakes
  memories that expire like any other unless restated: only the API pins a
  memory forever (``POST /memories`` with ``"pinned": true``);
* preferences only when emphasised, stated as standing ("always", "以后", …)
  or seen in ≥ 2 turns; constraints only when stated as standing rules;
* facts only when they describe the user (profile), under the same gate;
* task parameters, artifacts, decisions and individual actions never: they are
  this task's, not the user's. A finished goal becomes one "episode".

Promoted text is untrusted: it is what a user or a tool said, and a memory is
shown in the system message of the user's later sessions. So a candidate is one
line of at most ``MEMORY_CHARS`` characters, and text that addresses the model
rather than describing the user (role labels, "ignore your instructions",
"SYSTEM NOTE", their Chinese forms) is never promoted.

``decide`` then merges one candidate into the user's memories: a restatement
confirms, a contradiction supersedes, anything else is inserted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from app.compression.state import Item, TaskState
from app.compression.untrusted import one_line
from app.memories.lexical import jaccard, lexical_terms, normalize
from app.memories.vectors import cosine

Kind = Literal["preference", "profile", "rule", "high_stakes", "episode"]

# Calibrated on USE multilingual v3: paraphrases of one preference score
# 0.85–0.95, while "aisle" vs "window" versions of it score ≈ 0.85 too, which is
# why contradictions are detected before similarity is trusted.
RESTATEMENT_THRESHOLD = 0.85
_EPISODE_MAX_CHARS = 400
MEMORY_CHARS = 500

# Text that speaks to the model instead of about the user, by family of phrasing:
# chat-role labels and template tokens; "system note/prompt/message"; an order to
# drop or replace the instructions (verb, up to a few modifiers, what is dropped);
# role-play and mode switches. English and Chinese.
_ADDRESSES_MODEL = re.compile(
    r"(?:^|[^\w])(?:system|assistant|developer)\s{0,3}[:：]"
    r"|<\|?(?:im_start|im_end|system|endoftext)\|?>|\[/?inst\]|<</?sys>>"
    r"|\bsystem\s(?:note|notice|prompt|message|instruction|override|update|command)s?\b"
    r"|\b(?:developer|god|admin|dan)\smode\b|\bjailbreak"
    r"|\b(?:ignore|disregard|forget|override|bypass|overrule)\s"
    r"(?:(?:all|any|every|the|your|my|its|these|those|previous|prior|above|earlier|former|"
    r"original|existing|system|other|of)\s){0,4}"
    r"(?:instructions?|prompts?|rules|guidelines|directives?|directions|guardrails|"
    r"programming|training|policies)\b"
    r"|\bnew\s(?:instructions?|directives?|rules)\s{0,3}[:：]|\bnew\ssystem\sprompt\b"
    r"|\byou\s(?:are|will\sbe)\snow\s(?:a|an|the|in|my|no\slonger)\b"
    r"|(?:忽略|无视|忽视|忘记|忘掉|不要理会|别管|覆盖|绕过)"
    r"[^。！？\n]{0,8}?(?:指令|指示|提示词?|规则|设定|约束|要求)"
    r"|系统(?:提示|消息|指令|通知|备注|说明)|开发者模式|越狱|你现在是|从现在起你是"
)


def addresses_model(text: str) -> bool:
    """Whether ``text`` speaks to the model (an injected instruction), not about the user."""
    return bool(_ADDRESSES_MODEL.search(normalize(text)))


_STANDING = re.compile(
    r"\b(?:always|never|every ?time|whenever|from now on|in general|generally|usually|"
    r"by default|remember)\b|以后|今后|总是|一直|永远|每次|从不|从来|记住|一般|平时|向来|凡是"
)
_PROFILE = re.compile(
    r"^(?:i am|i'm|my name|i live|i work|i was born|i grew up|i come from|my (?:wife|husband|"
    r"partner|son|daughter|kids?|children|birthday|job|home|email|phone)|i have (?:a|an|two|"
    r"three) (?:kids?|children|sons?|daughters?|dogs?|cats?))\b"
    r"|^我(?:是|叫|姓|住|来自|在.{1,12}(?:工作|上班|上学)|的(?:生日|名字|工作|职业|邮箱|电话|家)|"
    r"今年|有(?:一|两|三)?个(?:孩子|儿子|女儿))"
)


@dataclass(frozen=True)
class Candidate:
    text: str
    kind: Kind
    pinned: bool
    source_seqs: list[int]
    emphasized: bool


def _candidate(item: Item, kind: Kind) -> Candidate:
    return Candidate(
        text=one_line(item.text, MEMORY_CHARS),
        kind=kind,
        pinned=False,
        source_seqs=sorted(set(item.source_seqs)),
        emphasized=item.emphasized,
    )


def _is_standing(text: str) -> bool:
    return bool(_STANDING.search(normalize(text)))


def _well_attested(item: Item) -> bool:
    """Emphasised, stated as standing, or repeated across turns."""
    return item.emphasized or _is_standing(item.text) or len(set(item.source_seqs)) >= 2


def _episode(state: TaskState) -> Candidate | None:
    done = [a for a in state.actions if a.status == "done"]
    if state.goal is None or not done:
        return None
    steps = "; ".join(f"{a.tool}: {a.result_summary}" if a.result_summary else a.tool for a in done)
    if state.language == "zh":
        text = f"已完成：{state.goal.text}。完成的操作：{steps}"
    else:
        text = f"Completed: {state.goal.text}. Done: {steps}"
    text = one_line(text, _EPISODE_MAX_CHARS)
    seqs = {*state.goal.source_seqs, *(s for a in done for s in a.source_seqs or [a.seq])}
    return Candidate(text, "episode", False, sorted(seqs), state.goal.emphasized)


def select_candidates(state: TaskState) -> list[Candidate]:
    """Long-term memory candidates in a session's state (see the module rules)."""
    found: list[Candidate] = [_candidate(h, "high_stakes") for h in state.high_stakes]
    found += [
        _candidate(p, "preference")
        for p in state.preferences
        if p.status == "active" and _well_attested(p)
    ]
    found += [
        _candidate(c, "rule")
        for c in state.constraints
        if c.status == "active" and _is_standing(c.text)
    ]
    found += [
        _candidate(f, "profile")
        for f in state.facts
        if f.status == "active" and _PROFILE.search(normalize(f.text)) and _well_attested(f)
    ]
    if (episode := _episode(state)) is not None:
        found.append(episode)
    unique: dict[str, Candidate] = {}
    for candidate in found:  # first wins: high-stakes outrank a duplicate preference
        if not addresses_model(candidate.text):
            unique.setdefault(normalize(candidate.text), candidate)
    return list(unique.values())


# --------------------------------------------------------------------------- merging


@dataclass(frozen=True)
class ExistingMemory:
    id: int
    text: str
    kind: str


@dataclass(frozen=True)
class Insert:
    pass


@dataclass(frozen=True)
class Confirm:
    memory_id: int


@dataclass(frozen=True)
class Supersede:
    memory_id: int


Decision = Insert | Confirm | Supersede

# Antonyms folded into "negation + verb" so "I hate X" contradicts "I love X".
_EN_FOLD = (
    (re.compile(r"\b(?:can't|cannot|can not) stand\b"), "not like"),
    (re.compile(r"\b(?:dislike|hate|detest)s?\b"), "not like"),
    (re.compile(r"\b(?:love|enjoy|adore)s?\b"), "like"),
    (re.compile(r"\bno longer\b"), "not"),
    (re.compile(r"n't\b"), " not"),
)
_ZH_FOLD = ((re.compile("讨厌|厌恶|受不了"), "不喜欢"), (re.compile("爱吃"), "喜欢吃"))
_EN_NEGATION = re.compile(r"\b(?:not|never|no)\b")
# 不 inside 不错, 不过 ("but"), 不同, 不少… is not a negation; 不过敏 is.
_ZH_NEGATION = re.compile(
    r"(?:从来不|从不|不再|不太|不怎么|不是很|不|没有|没|别)(?![错同少久仅但断论]|过(?!敏))"
)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# One token per CJK character (no spaces to split on), one per word otherwise.
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+(?:'[a-z]+)?")
_CJK_GAP = re.compile(rf"(?<=[{_CJK}]) (?=[{_CJK}])")
_SLOT_IN_PREFIX = re.compile(
    r"\b(?:prefer\w*|favou?rite|name|live[sd]?|living|address|e-?mail|phone|seat\w*|"
    r"birthday|based)\b|偏好|首选|最喜欢|叫|住|地址|电话|邮箱|座位|生日|名字|来自"
)
_SLOT_IN_SUFFIX = re.compile(r"\b(?:seats?)\b|座位|位置")
_MAX_VALUE_TOKENS = 4


def _polarity(text: str) -> tuple[bool, frozenset[str]]:
    """(negated?, terms of the statement with its negations removed)."""
    folded = normalize(text)
    for pattern, replacement in (*_EN_FOLD, *_ZH_FOLD):
        folded = pattern.sub(replacement, folded)
    negations = len(_EN_NEGATION.findall(folded)) + len(_ZH_NEGATION.findall(folded))
    core = _ZH_NEGATION.sub("", _EN_NEGATION.sub(" ", folded))
    return negations % 2 == 1, frozenset(lexical_terms(core))


def _negation_flip(a: str, b: str) -> bool:
    neg_a, core_a = _polarity(a)
    neg_b, core_b = _polarity(b)
    return neg_a != neg_b and bool(core_a) and jaccard(core_a, core_b) >= 0.6


# Discourse framing that says *when* a statement holds, not *what* it says: left
# out when aligning two statements ("From now on I prefer X" vs "I prefer Y").
_FRAMING = re.compile(
    r"^(?:(?:from now on|going forward|in (?:the )?future|these days|nowadays|actually|"
    r"by the way|btw|also|and|so|well|ok(?:ay)?)[,\s]+)+"
    r"|^(?:从现在(?:开始|起)|从今(?:以后|往后)|今后|以后|现在|其实|另外|还有)[，,\s]*"
)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(_FRAMING.sub("", normalize(text)))


def _joined(tokens: Iterable[str]) -> str:
    return _CJK_GAP.sub("", " ".join(tokens))


def _slot_value_change(a: str, b: str) -> bool:
    """Same statement with a different value in a single-valued slot.

    "my seat preference is aisle" / "… window", "我的座位偏好是靠窗" / "…过道":
    a shared frame naming a slot, differing only in a short value.
    """
    ta, tb = _tokens(a), _tokens(b)
    prefix = 0
    while prefix < min(len(ta), len(tb)) and ta[prefix] == tb[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(ta), len(tb)) - prefix and ta[-1 - suffix] == tb[-1 - suffix]:
        suffix += 1
    mid_a, mid_b = ta[prefix : len(ta) - suffix], tb[prefix : len(tb) - suffix]
    if not mid_a or not mid_b or max(len(mid_a), len(mid_b)) > _MAX_VALUE_TOKENS:
        return False
    shared = prefix + suffix
    if shared < 2 or shared < 0.5 * max(len(ta), len(tb)):
        return False
    return bool(
        _SLOT_IN_PREFIX.search(_joined(ta[:prefix]))
        or (prefix and _SLOT_IN_SUFFIX.search(_joined(ta[len(ta) - suffix :])))
    )


def contradicts(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` say opposite things about the same subject."""
    return _negation_flip(a, b) or _slot_value_change(a, b)


def _comparable(candidate: Candidate, memory: ExistingMemory) -> bool:
    # An episode is a record of what happened, not a claim a preference can contradict.
    return (candidate.kind == "episode") == (memory.kind == "episode")


def decide(
    candidate: Candidate,
    existing: Sequence[ExistingMemory],
    *,
    similarity: Callable[[str, str], float],
    threshold: float = RESTATEMENT_THRESHOLD,
) -> Decision:
    """Insert, Confirm (a restatement) or Supersede (a contradiction) for ``candidate``.

    Contradiction wins over similarity: "I like sushi" and "I don't like sushi"
    are close in any embedding space. Among several matches the most similar wins.
    """
    key = normalize(" ".join(candidate.text.split()))
    scored = [
        (similarity(candidate.text, m.text), m) for m in existing if _comparable(candidate, m)
    ]
    scored.sort(key=lambda pair: -pair[0])
    for _, memory in scored:
        if contradicts(candidate.text, memory.text):
            return Supersede(memory.id)
    for score, memory in scored:
        if normalize(" ".join(memory.text.split())) == key or score >= threshold:
            return Confirm(memory.id)
    return Insert()


def vector_similarity(vectors: Mapping[str, Sequence[float]]) -> Callable[[str, str], float]:
    """A ``similarity`` over precomputed unit vectors keyed by text (embed first, async)."""

    def similarity(a: str, b: str) -> float:
        return cosine(vectors[a], vectors[b])

    return similarity

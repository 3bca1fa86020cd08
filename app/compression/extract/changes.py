"""Changes of mind: a value replaced by another, a choice reversed.

Two families, both languages:

* **value changes** — the old and the new value in one statement, with the
  name of what changed when it is said: "the deadline moved from May 2 to
  May 9", "seat count is now 12, not 10", "I said 300, but it's actually 340",
  "head count: 40 → 55", "预算从 8000 调整到 9500", "人数不是30了，改成45",
  "以周五为准，别再按周四了", "截止日期调成6月3日吧，5月30日不合适";
* **reversals** — a choice withdrawn and another made: "not the Hilton — the
  Marriott instead", "skip Acme this time and go with Zenith", "X is a bad
  idea. Make it Y", "不要A了，换B", "A不考虑了，直接上B", "A那个方案pass，走B".

A change with a name becomes a parameter with its previous value; one without
becomes a decision that says what it replaced ("B instead of A"), and what the
state held about the old choice is revoked. The sentence then feeds no other
family: it is neither a new rule nor a new request.

Patterns are fixed phrases with bounded gaps; no nested quantifiers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.compression.extract.context import Context
from app.compression.extract.gates import Gated
from app.compression.extract.patterns import SENTENCE_SPLIT, literal_hint
from app.compression.extract.proposal import proposes
from app.compression.state import DecisionUnit, ParameterUnit, RevocationUnit, Unit
from app.compression.text import clip, normalize

_I = re.IGNORECASE
# A value: a short run inside one clause, starting on a non-space character.
_V = r"[^\s,;，；。!?！？][^,;，；。!?！？]{0,39}?"
_END = r"(?=\s*+(?:[,;，；。.!?！？]|$|(?<=\s)(?:and|but|please|then)\b))"
_ZV = r"[^\s，,；;。！!？?]{1,20}?"  # a Chinese value: no spaces, one clause

# ----------------------------------------------------------------- value changes
_VALUE_CHANGES = [
    # "set the X to B, please — A won't work", "change X to B? A doesn't suit us after all"
    re.compile(
        rf"\b(?:change|set|switch|update|make|move|bump|raise|lower|put)\s++"
        rf"(?:the\s++|my\s++|our\s++)?(?P<name>[A-Za-z][\w-]*+(?:\s++[A-Za-z][\w-]*+){{0,3}}?)"
        rf"\s++to\s++(?P<new>{_V})(?:,?\s*+please)?\s*+[—–\-,;.?!]++\s*+(?:the\s++)?"
        rf"(?P<old>{_V})\s++(?:won'?t|will not|doesn'?t|does not|no longer|isn'?t|is not|can'?t"
        rf"|cannot)\s++(?:(?:work|fit|do|suit)(?:s|es)?|be enough)\b",
        _I,
    ),
    # "swap A (out) for B", "replace A with B", "trade A for B"
    re.compile(
        rf"\b(?:swap|switch|trade|exchange|replace)\s++(?P<old>{_V})\s++(?:out\s++)?(?:for|with)"
        rf"\s++(?P<new>{_V}){_END}",
        _I,
    ),
    # "X went from A to B", "from A to B"
    re.compile(rf"\bfrom\s++(?P<old>{_V})\s++(?:to|into)\s++(?P<new>{_V}){_END}", _I),
    # "A → B"
    re.compile(
        r"(?<![^\s,;，；：:])(?P<old>[^\s,;，；：:→>]{1,20}+)\s*+(?:→|->|⇒|=>)\s*+"
        r"(?P<new>[^\s,;，；。!?！？]{1,20})"
    ),
    # "make the X 25% instead of 10%", "set the X to 25 rather than 10": the setting said
    # with what it replaces. Without "to", the new value starts with a figure ("make the
    # cap 30 instead of 20"), so that the name does not swallow it or it the name.
    re.compile(
        rf"\b(?:change|set|switch|update|make|move|bump|raise|lower|put|keep|cap|limit)\s++"
        rf"(?:the\s++|my\s++|our\s++)?(?P<name>[A-Za-z][\w-]*+(?:\s++[A-Za-z][\w-]*+){{0,3}}?)"
        rf"\s++(?:(?:to|at|as)\s++(?P<new>{_V})|(?P<new2>[¥$€£]?\d[^,;，；。!?！？]{{0,30}}?))\s*+"
        rf"(?:,\s*+not|(?<=\s)(?:rather than|instead of))\s++(?P<old>{_V}){_END}",
        _I,
    ),
    # "is now B, not A" / "B rather than A" / "B instead of A"
    re.compile(
        rf"(?<![^\s:：—–-])(?P<new>{_V})\s*+(?:[,—–-]\s*+not|(?<=\s)(?:rather than|instead of))"
        rf"\s++(?P<old>{_V}){_END}",
        _I,
    ),
    # "I said A, but it's actually B"
    re.compile(
        rf"\bsaid\s++(?P<old>{_V}),?\s++but\s++(?:it'?s|it is|that'?s|make it)\s++"
        rf"(?:(?:actually|really)\s++)?(?P<new>{_V}){_END}",
        _I,
    ),
    # 从A调整到B / 由A改为B
    re.compile(
        rf"[从由]\s*+(?P<old>{_ZV})\s*+(?:调整|调|改|变|涨|降|提高|降低|增加|减少|换|上调|下调)"
        rf"(?:到|为|成)\s*+(?P<new>[^\s，,；;。！!？?][^，,；;。！!？?]{{0,19}})"
    ),
    # 不是A了，改成B
    re.compile(
        rf"不(?:是|再是)\s*+(?P<old>{_ZV})\s*+了\s*+[，,]?\s*+(?:改成|改为|换成|是|改|换|按)\s*+"
        rf"(?P<new>[^\s，,；;。！!？?][^，,；;。！!？?]{{0,19}})"
    ),
    # 以B为准，别再按A了
    re.compile(
        rf"以\s*+(?P<new>{_ZV})\s*+为准[^。！!？?]{{0,20}}?(?:别再按|不再按|不按|别按|不用)\s*+"
        r"(?P<old>[^\s，,；;。了]{1,20})"
    ),
    # A不行了，换成B / A去不了，改到B
    re.compile(
        rf"(?P<old>{_ZV})\s*+(?:不行了|不行|不合适|不算了|作废了?|不要了|取消|去不了|来不了|赶不上"
        rf"|不方便|没空|约不上)\s*+[，,]\s*+"
        rf"(?:换成|改成|改为|换到|改到|调成|调到|换|改)\s*+(?P<new>{_ZV})(?=[，,；;。！!？?]|$)"
    ),
    # 应该是B，不是A
    re.compile(
        rf"(?:应该是|应为|是)\s*+(?P<new>{_ZV})\s*+[，,]\s*+不是\s*+(?P<old>{_ZV})(?=[，,；;。！!？?]|$)"
    ),
    # 调成B吧，A不合适 / 按B来，之前说的A不算
    re.compile(
        rf"(?:调成|调到|改成|改到|改为|换成|定为|定成|按)\s*+(?P<new>{_ZV})\s*+(?:来|吧|哈)?\s*+[，,]\s*+"
        rf"(?:之前说的|原来的|原先的|之前的)?\s*+(?P<old>{_ZV})\s*+"
        r"(?:不合适|不算|不行|作废|不要了|不用了)"
    ),
]

# Each searched only where its literals occur (``gates``): a whole turn is read for a
# change, and the lazy values made each pattern cost a scan of it from every position.
_VALUE_CHANGES_GATED = tuple(Gated(pattern) for pattern in _VALUE_CHANGES)

# What leads into a name ("Update: the …", "Correction on the …") and what
# follows it ("… went from", "… is now", "… adjusted —").
_NAME_LEAD = re.compile(
    r"^(?:(?:update|correction|heads-?up|note|also|and|so|ok(?:ay)?|actually|hmm+|well|please"
    r"|i need|i want|we need|let'?s make|make|on|about|for|of|the|my|our|your|a"
    r"|(?:can|could|would|will) (?:you|we)|let'?s|change|set|swap|replace)\b[\s:,—-]*+)*+",
    _I,
)
_NAME_CUT = re.compile(
    r"\b(?:went|goes|moved|moves|changed|changes|is now|are now|is|are|was|should be|needs to be"
    r"|adjusted|updated|bumped|shifted|lowered|raised|increased|decreased|reduced|extended|cut"
    r"|pushed|set|revised|corrected|to|now|has|have|go with|going with|use|using|pick|choose"
    r"|opt for|settle on)\b|[:：—–]| - ",
    _I,
)
_PRONOUN = frozenset("i we you it that this they he she".split())
_ZH_NAME_TAILS = (
    "应该是",
    "应为",
    "得变一下",
    "变一下",
    "得改一下",
    "是",
    "有变化",
    "有变动",
    "变了",
    "改了",
    "再改一次",
    "改一下",
    "调一下",
    "那边",
    "这边",
    "这块",
    "这一项",
    "这项",
    "方面",
    "的话",
    "调成",
    "调到",
    "改成",
    "改到",
    "改为",
    "换成",
    "定为",
    "不再是",
    "不是",
    "按",
    "以",
    "从",
    "由",
    "不",
)
_ZH_NAME_HEADS = (
    "另外",
    "还有",
    "对了",
    "然后",
    "那个",
    "这个",
    "关于",
    "我们的",
    "我们",
    "我的",
    "我",
)
_PARTICLES = "哈吧啊了呢：:，, "
_SENTENCE_END = re.compile(r"[.;。；!！?？]")
_COMMA = re.compile(r"[，,]")
_COLON = re.compile(r"[:：]")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3})")  # "$8,400" → "$8400": a comma ends a clause
_LATIN = re.compile(r"[A-Za-z]")
_FIGURE = re.compile(r"\d|[一二三四五六七八九十百千万两]")
_VALUE_HEAD = re.compile(r"^(?:the|a|an|to|is|it'?s|be)\s++", _I)
_VALUE_TAILS = (" instead", " now", " then", " please", " this time")
# "the seat count is now 12": where the new value itself starts.
_NEW_LEAD = re.compile(
    r"\b(?:is now|are now|now|is|are|to|be|at|go with|going with|use|using|pick|choose|opt for"
    r"|settle on|make it)\s++|(?<!\d)[:：—–]\s*+",
    _I,
)


@dataclass(frozen=True, slots=True)
class Change:
    name: str | None
    old: str
    new: str


def _strip_tails(value: str, tails: tuple[str, ...], chars: str = "") -> str:
    """``value`` without any of ``tails`` (repeatedly) or trailing ``chars``."""
    previous = None
    while previous != value:
        previous = value
        value = value.rstrip(chars) if chars else value
        for tail in tails:
            if value.casefold().endswith(tail.casefold()):
                value = value[: len(value) - len(tail)]
    return value


def _strip_heads(value: str, heads: tuple[str, ...]) -> str:
    previous = None
    while previous != value:
        previous = value
        for head in heads:
            if value.startswith(head):
                value = value[len(head) :]
    return value


def _clean(value: str) -> str:
    value = _VALUE_HEAD.sub("", value.strip())
    value = _strip_tails(value, _VALUE_TAILS)
    return value.strip(" \"'“”`.。")


def _name(head: str) -> str | None:
    """The name of what changed, from the words before the change."""
    clause = _SENTENCE_END.split(head)[-1]
    if _CJK.search(clause):
        clause = next((c for c in reversed(_COMMA.split(clause)) if c.strip()), "").strip()
        name = _strip_tails(clause, _ZH_NAME_TAILS, _PARTICLES)
        name = _strip_heads(name.strip(_PARTICLES), _ZH_NAME_HEADS).strip(_PARTICLES)
        return name if 2 <= len(name) <= 12 else None
    # "Update: the seat count is now" / "Correction on the fee: I said": the name is
    # after the label, or before it when what follows is the speaker talking.
    parts = [p for p in _COLON.split(clause) if p.strip()]
    for part in reversed(parts[-2:]):
        found = _en_name(part)
        if found is not None:
            return found
    return None


def _en_name(part: str) -> str | None:
    cut = _NAME_CUT.search(part)
    name = part[: cut.start()] if cut else part
    name = _NAME_LEAD.sub("", name.strip()).strip(" :,—-")
    words = name.split()
    if not 1 <= len(words) <= 4 or len(name) > 40 or not _LATIN.search(name):
        return None
    if words[0].lower() in _PRONOUN or any(w.lower() in ("that", "this", "it") for w in words):
        return None
    return name


def _tail(value: str) -> tuple[str, str]:
    """("the seat count is now ", "12") from "the seat count is now 12"."""
    end = 0
    for m in _NEW_LEAD.finditer(value):
        if m.end() < len(value):
            end = m.end()
    return value[:end], value[end:]


def _figure(value: str) -> bool:
    return _FIGURE.search(value) is not None


def _short_name(value: str) -> bool:
    return len(value.split()) <= 4 and len(value) <= 30


_ASKS_OPINION = re.compile(
    r"\b(?:should|shall|would it|is it|do you think|what if|maybe|perhaps|wonder)\b", _I
)
# A value change is said as one: "from 9 to 5" alone is a span, not a change.
CHANGE_CUE = re.compile(
    r"\b(?:went|goes|moved?|changed?|switch\w*|shift\w*|bump\w*|push\w*|updat\w*|adjust\w*"
    r"|correct\w*|rais\w*|lower\w*|increas\w*|decreas\w*|extend\w*|reduc\w*|instead|rather"
    r"|now|actually|new value|flip|swap\w*|replac\w*|trad\w*|exchang\w*|set|make)\b"
    r"|调整|改|调|变|涨|降|提高|增加|减少|换|为准|不是|不算|不合适|→|->",
    _I,
)


# Supersets of the cues (tests/unit/compression/test_patterns.py checks it).
HINT_CHANGE = literal_hint(
    "went|goes|move|chang|switch|shift|bump|push|updat|adjust|correct|rais|lower|increas"
    "|decreas|extend|reduc|instead|rather|now|actually|new value|flip|swap|replac|trad|exchang"
    "|set|make"
    "|调整|改|调|变|涨|降|提高|增加|减少|换|为准|不是|不算|不合适|→|->"
)


def value_change(text: str) -> Change | None:
    if HINT_CHANGE.search(text.lower()) is None or CHANGE_CUE.search(text) is None:
        return None
    text = _THOUSANDS.sub("", text)
    low = text.lower()
    for gated in _VALUE_CHANGES_GATED:
        m = gated.search(text, low)
        if m is None:
            continue
        said_new = m["new"] if m["new"] is not None else m.groupdict().get("new2") or ""
        lead, new = _tail(said_new)
        old, new = _clean(m["old"]), _clean(new)
        if not old or not new or normalize(old) == normalize(new) or len(new) > 40:
            continue
        if not (_figure(old) or _figure(new) or (_short_name(old) and _short_name(new))):
            continue
        if m.re is _VALUE_CHANGES[1] and _ASKS_OPINION.search(text[: m.start()]):
            continue  # "should we swap A for B?" weighs a change, it does not make one
        if _proposed(text, m.start()):
            continue  # "要不要从A调整到B？": a question proposes a change, it makes none
        named = m.groupdict().get("name")
        at_new = m.start("new") if m["new"] is not None else m.start("new2")
        head = text[: min(m.start("old"), at_new + len(lead))]
        return Change(_en_name(named) if named else _name(head), old, new)
    return None


def _proposed(text: str, at: int) -> bool:
    """Whether the sentence of ``text`` holding position ``at`` is a question that
    proposes rather than decides ("should we …?", "要不要…？")."""
    start = 0
    for cut in SENTENCE_SPLIT.finditer(text):
        if cut.start() >= at:
            return proposes(text[start : cut.start()])
        start = cut.end()
    return proposes(text[start:])


# ----------------------------------------------------------------- reversals
_W = r"[^\s,;—–.!?][^,;—–.!?]{0,39}?"  # a choice: a short run starting on a non-space
_STOP = r"\s*+(?:[,;—–.!?]|$)"
_EN_DROP = re.compile(
    rf"\bnot\s++(?P<a>{_W}){_STOP}"
    rf"|\b(?:skip|drop|forget|ditch|scrap)\s++(?P<b>{_W})(?:\s++(?:this time|after all))?"
    rf"(?:{_STOP}|\s++and\b)"
    rf"|\b(?:take back|reverse|retract|withdraw) what i said (?:(?:earlier|before) )?about\s++"
    rf"(?P<c>{_W}){_STOP}"
    rf"|\b(?:i was wrong about|never ?mind|forget about)\s++(?P<e>{_W})(?:{_STOP}|\s++(?:it is"
    rf"|it's)\b)"
    rf"|\b(?:beats|is better than|makes more sense than|is a better fit than)\s++(?P<f>{_W}){_STOP}"
    r"|(?<![\w'&.-])(?P<d>(?:the\s++)?(?-i:[A-Z])[\w'&.-]{0,30}+(?:\s++(?-i:[A-Z])[\w'&.-]{0,30"
    r"}+){0,3}"
    r"|[a-z]{1,20}+-[a-z0-9-]{0,20}?\d)\s++(?:is a bad idea|(?:doesn'?t|does not|won'?t) work"
    r"|is out|is off the table|is no good)",
    _I,
)
_EN_TAKE = re.compile(
    rf"\b(?:make it|let'?s do|let'?s go with|go with|switch to|i want|i'?d rather have|use|pick)"
    rf"\s++(?P<a>{_W})(?:\s++instead)?{_STOP}"
    rf"|(?<![^\s,;—–.!?])(?P<b>{_W})\s++(?:instead|makes more sense|is better|it is|wins)"
    rf"(?:\s++\w++){{0,3}}?{_STOP}"
    rf"|(?<![^\s,;—–.!?])(?P<c>{_W})\s++(?:beats|is better than|makes more sense than)\b"
    rf"|\bswitch (?:it |that |this )?(?:over )?to\s++(?P<d>{_W})(?:,?\s++please)?{_STOP}",
    _I,
)
EN_CUE = re.compile(
    r"\b(?:changed my mind|change of plans?|instead|take back|reverse what|scratch that"
    r"|on second thought|bad idea|doesn'?t work|skip|drop|scrap|ditch|forget|rather|make it"
    r"|switch|go with|pick|wrong about|never ?mind|beats|better than|flip)\b",
    _I,
)
_ZH_DROP = re.compile(
    rf"(?:不要|不选|不用|不去)\s*+(?P<a>[^\s，,；;。了]{{1,20}}?)\s*+了"
    rf"|比\s*+(?P<d>{_ZV})\s*+更(?:合适|好|划算|方便|靠谱)"
    rf"|(?P<b>{_ZV})\s*+(?:不考虑了|不考虑|作废|撤掉|撤了|不行|pass掉?|不算|不合适|不要了|算了|不用了)"
    rf"|(?:别再按|不再按|别再用|不再用|不用)\s*+(?P<c>[^\s，,；;。了]{{1,20}})"
)
_ZH_TAKE = re.compile(
    rf"(?:换成|换|改成|改为|改|走|直接上|上|用|我选|选|就定|定|还是|就)\s*+(?P<a>{_ZV})\s*+(?:吧|了|来|为准)?"
    r"\s*+(?:[，,；;。！!？?]|$)"
    rf"|以\s*+(?P<b>{_ZV})\s*+为准"
    rf"|(?<![^\s，,；;。！!？?])(?P<c>{_ZV})\s*+(?:比[^，,；;。]{{1,20}}?)?更(?:合适|好|划算|方便|靠谱)"
)
ZH_CUE = re.compile(
    r"改主意|反悔|收回|不要了|算了|不选|更合适|不要[^。！!？?]{1,20}?了|不考虑|作废|撤掉|pass|不算|换成|改成|还是[^。！!？?]{1,20}?吧|为准|直接上"
)
HINT_EN_REVERSAL = literal_hint(
    "changed my mind|change of plan|instead|take back|reverse what|scratch that|on second thought"
    "|bad idea|doesn't work|doesnt work|skip|drop|scrap|ditch|forget|rather|make it|switch"
    "|go with|pick|wrong about|never mind|nevermind|beats|better than|flip"
)
HINT_ZH_REVERSAL = literal_hint(
    "改主意|反悔|收回|不要|算了|不选|更合适|不考虑|作废|撤掉|pass|不算|换成|改成|还是|为准|直接上"
)
_ZH_HEADS = (
    "我们",
    "我",
    "那就",
    "那",
    "这样",
    "那个",
    "这个",
    "之前选的",
    "之前说的",
    "原来的",
    "刚才说的",
    "想来想去",
    "最后",
    "还是",
    "直接",
    "干脆",
    "要",
    "就",
)
_ZH_TAILS = (
    "想来想去还是",
    "还是",
    "那个方案",
    "这个方案",
    "方案",
    "那个",
    "这个",
    "吧",
    "了",
    "哈",
    "啊",
    "呢",
)
_EN_HEADS = (
    "hmm ",
    "ok ",
    "okay ",
    "actually ",
    "well ",
    "so ",
    "and ",
    "but ",
    "i've changed my mind ",
    "on second thought ",
    "the ",
)
_EN_TAILS = (" this time", " after all", " for me", " anymore", " any more", " instead", " please")
_POINTERS = frozenset(("that one", "this one", "that", "this", "it", "那个", "这个", "它"))
_EDGE = " ，,。.:：—–-\"'“”"


def _group(m: re.Match[str] | None) -> str | None:
    if m is None:
        return None
    return next((g for g in m.groups() if g), None)


def reversal(text: str) -> Change | None:
    """A choice withdrawn and another made, in one turn (one or two sentences)."""
    text = _THOUSANDS.sub("", text)
    zh = _CJK.search(text) is not None
    cue, drop_re, take_re = (ZH_CUE, _ZH_DROP, _ZH_TAKE) if zh else (EN_CUE, _EN_DROP, _EN_TAKE)
    heads, tails = (_ZH_HEADS, _ZH_TAILS) if zh else (_EN_HEADS, _EN_TAILS)
    hint = HINT_ZH_REVERSAL if zh else HINT_EN_REVERSAL
    if hint.search(text.lower()) is None or cue.search(text) is None:
        return None
    dropped = drop_re.search(text)
    old = _group(dropped)
    if dropped is None or old is None or _proposed(text, dropped.start()):
        return None  # "should we skip A and go with B?" weighs a change
    # The new choice is said after the old one, or before it ("Y instead, not X").
    rest = text[dropped.end() :]
    after = _group(take_re.search(rest))
    before = _group(take_re.search(text[: dropped.end()]))
    if after is not None and _trim(after, heads, tails).casefold() in _POINTERS:
        after = None  # "… Go with that one": the choice was named before
    taken = after or before
    if taken is None:
        return None
    old, new = _trim(old, heads, tails), _trim(taken, heads, tails)
    if not old or not new or normalize(old) == normalize(new) or normalize(old) in normalize(new):
        return None
    if len(new) > 30 or len(old) > 30:
        return None
    return Change(None, old, new)


def _trim(value: str, heads: tuple[str, ...], tails: tuple[str, ...]) -> str:
    previous = None
    value = value.strip(_EDGE)
    while previous != value:
        previous = value
        lowered = value.casefold()
        for head in heads:
            if lowered.startswith(head):
                value = value[len(head) :].strip(_EDGE)
                break
        value = _strip_tails(value, tails).strip(_EDGE)
    return value


# ----------------------------------------------------------------- units


# Words that mark a line as replaced (the state's readers look for them).
_SAYS_REPLACED = re.compile(r"\S \binstead of\b \S", _I)


def change_units(text: str, seq: int, ctx: Context, language: str) -> list[Unit]:
    """Units for a change of mind stated in ``text`` (a user turn), or []."""
    change = value_change(text) or reversal(text)
    if change is None:
        return []
    units: list[Unit] = []
    name = change.name
    if name is None:
        owner = ctx.param_with_value(change.old)
        name = owner[0] if owner else None
    if name is not None:
        units.append(
            ParameterUnit(
                name=clip(name, 60),
                value=clip(change.new, 80),
                previous=clip(change.old, 80),
                source_seqs=[seq],
            )
        )
    else:
        # The user's own words when they already say what was replaced.
        note = "{new} instead of {old}" if language == "en" else "改为{new}（不再是{old}）"
        # "Use X instead of Y." already reads as the record; anything else is rewritten
        # in that shape, which the renderer reads back to mark the old choice elsewhere.
        said = clip(text.strip(), 240) if language == "en" and _SAYS_REPLACED.search(text) else None
        units.append(
            # Held like a parameter (never decays): it says which choice is current.
            DecisionUnit(
                text=said or note.format(new=change.new, old=change.old),
                source_seqs=[seq],
                emphasized=True,
            )
        )
    withdrawn = ctx.best_match(ctx.revocable, change.old)
    if withdrawn is not None and normalize(change.new) not in normalize(withdrawn.text):
        units.append(RevocationUnit(text=clip(text, 240), target=withdrawn.key, source_seqs=[seq]))
    return units


def apart_from(param: ParameterUnit, changed: list[Unit]) -> bool:
    """Whether a setting the sentence rules read from a turn is not the change of
    mind's own sentence read another way: "Set the budget to 250. Skip Acme and go
    with Zenith." sets the budget as well as changing the choice."""
    said = normalize(
        " ".join(
            str(v)
            for u in changed
            if not isinstance(u, RevocationUnit)  # it quotes the whole turn
            for v in (
                getattr(u, "text", None),
                getattr(u, "name", None),
                getattr(u, "value", None),
                getattr(u, "previous", None),
            )
            if v
        )
    )
    value, name = normalize(param.value), normalize(param.name)
    return bool(value) and value not in said and name not in said

"""Per-sentence rule families for user and system speech, Chinese and English.

Order matters and is deliberate (first match wins where families compete):

1. noise and chit-chat → nothing;
2. revocation ("取消…", "scratch that", "no longer…") → it does not also
   become a constraint, even though "不再限制…" contains a constraint cue;
3. high-stakes facts (allergies, medication, payment, identity) → pinned;
4. explicit goal changes;
5. "X is done / X 完成了" closing a known todo;
6. parameters, preferences, constraints, todos, blockers, decisions, pending;
7. a sentence nothing explains but that carries an amount or a date → a fact,
   unless it is small talk ("barbecue this Saturday, can't wait", "又是周一，好想放假").

A parameter change also retires an earlier constraint on that parameter
("batch size must be 32" then "batch size 改成 64"), so the prompt never holds
two contradicting numbers as both current.
"""

from __future__ import annotations

import re

from app.compression.extract import patterns
from app.compression.extract.changes import value_change
from app.compression.extract.context import Context
from app.compression.extract.deferral import deferral
from app.compression.extract.entities import DATE_GATED, find_artifacts, has_amount_or_date
from app.compression.extract.gates import LEXICON, Gated, Trie
from app.compression.extract.proposal import is_question, proposes
from app.compression.state import (
    BlockerUnit,
    ConstraintUnit,
    DecisionUnit,
    FactUnit,
    GoalUnit,
    HighStakesCategory,
    HighStakesUnit,
    ParameterUnit,
    PendingUnit,
    PreferenceUnit,
    RevocationUnit,
    TodoUnit,
    Unit,
)
from app.compression.text import clip, normalize, param_key

TEXT_CHARS = 240
_CLAUSE = re.compile(r"[，,；;]\s*")
_NEGATION = re.compile(r"不要|别|不能|不得|禁止|(?i:\b(?:don'?t|do not|never|not)\b)")
_NUMBER = re.compile(r"[¥$€£]?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?\s?%?")
# Words that lead into a name without being part of it ("actually the lr should be…").
_HEDGE = re.compile(
    r"^(?:.*\b)?(?:i think|i guess|i believe|maybe|perhaps|probably|i mean|actually|also|and|but"
    r"|so|now|ok|okay|well|then|oh)\s+",
    re.I,
)
_TODO_LEAD = re.compile(
    r"^(?:i'?ll|i will|let me|we'?ll|we will|i'?m going to|we'?re going to)\s+"
    r"|^(?:我会|我将|我来|我再)",
    re.I,
)
# Prerequisites stated as a condition on the todo ("once you have X", "等X之后再…"),
# as opposed to a missing thing named inside it ("缺少…"): the todo text stops there.
_CONDITION_GROUPS = (
    "once_given",
    "required",
    "zh_provide",
    "zh_wait_given",
    "once_event",
    "zh_wait_until",
)
# What is left of a condition clause once it is cut: "… that", "…，等". A run of
# these words is entered at its first word only (the lookbehinds), so a text of
# "and and and …" is scanned once rather than from every word.
_TAIL_WORDS = ("once", "after", "when", "as soon as", "until", "but", "and", "that", "which")
_TODO_TAIL = re.compile(
    r"(?<!\s)"
    + "".join(rf"(?<!\s{word})" for word in _TAIL_WORDS)
    + rf"(?:\s++(?:{'|'.join(_TAIL_WORDS)}))++$"
    r"|[，,]?(?<!\s)\s*+(?:等|需要先|要先)$",
    re.I,
)
_SPEECH_VALUE = re.compile(
    r"(?:i|i'm|i've|i'll|we|we're|we've|my|our|you|you're|your|he|she|they|they're|it's"
    r"|there's|this is|that is)\s+\S+\s+\S",
    re.I,
)
_CJK_CHARS = re.compile(r"[\u4e00-\u9fff]")
_CLAUSE_MARK = re.compile(r"[，,；;:：]")
_VALUE_LEAD = re.compile(r"^(?:了|成|为)\s*")  # "改成了 64", "设为 64"
_VALUE_LIKE = re.compile(r"(?<!\s)\s*+[A-Za-z0-9\"“'¥$]")
_NAME_LEAD = re.compile(r"^(?:the|my|our|your)\s+", re.I)
# "Then close the ticket once she confirms": a next step with a condition, not a deferral.
_SEQUENCE_LEAD = re.compile(
    r"(?:then|next|after that|afterwards|later)\b|然后|接下来|下一步|之后", re.I
)
_TARGET_LEAD = re.compile(
    r"^(?:之前的?|刚才的?|那个|这个|上面的?|前面的?)|^(?:the|my|that|this|about|on|of)\s+", re.I
)
# "取消评估模型这个任务": the task is "评估模型"; the tail only points at it.
_TARGET_TRAIL = re.compile(
    r"(?:这个|那个|的)?(?:任务|要求|限制|计划|事情|事|设置|约束)$|(?<!\s)\s++(?:requirement|constraint|rule"
    r"|restriction|task|plan|thing)s?$",
    re.I,
)


# The families read as yes or no, asked of the alternatives that can match (``gates``),
# behind the same hints as before.
_EMPHASIS = Gated(patterns.EMPHASIS, patterns.HINT_EMPHASIS)
_CONSTRAINT_RULE = patterns.CONSTRAINT_GATED.behind(patterns.HINT_CONSTRAINT)
_PREFERENCE = Gated(patterns.PREFERENCE, patterns.HINT_PREFERENCE)
_BLOCKER = Gated(patterns.BLOCKER, patterns.HINT_BLOCKER)
_DECISION = Gated(patterns.DECISION, patterns.HINT_DECISION)
_CHITCHAT = Gated(patterns.CHITCHAT, patterns.HINT_CHITCHAT)
_SOCIAL = Gated(patterns.SOCIAL)
_REVOKE = Gated(patterns.REVOKE)  # behind its hint, which the rule asks first
_HIGH_STAKES = tuple((category, Gated(pattern)) for category, pattern in patterns.HIGH_STAKES)


def strip_bullet(text: str) -> str:
    # Most sentences start with a letter: the substitution is not even tried.
    head = text[:1]
    return (
        patterns.BULLET.sub("", text) if head in patterns.BULLET_START or head.isspace() else text
    )


def clean(sentence: str) -> str:
    return patterns.LEADING_FILLER.sub("", strip_bullet(sentence)).strip()


def is_noise(sentence: str) -> bool:
    # Only a short sentence can normalise to under two characters of words.
    if (len(sentence) < 32 and len(normalize(sentence)) < 2) or patterns.NOISE.match(sentence):
        return True
    return _CHITCHAT.matches(sentence, _lower(sentence))


def is_social(sentence: str) -> bool:
    """Small talk markers ("can't wait", "haha", "好想放假"): not task content."""
    return _SOCIAL.matches(sentence, _lower(sentence))


def is_offer(sentence: str) -> bool:
    """A generic offer or sign-off ("Let me know if you'd like more", "随时告诉我")."""
    return _hinted(patterns.HINT_OFFER, sentence) and patterns.OFFER.search(sentence) is not None


def emphasized(sentence: str, turn_emphasized: bool) -> bool:
    if turn_emphasized:
        return True
    return _EMPHASIS.matches(sentence, _lower(sentence))


# ----------------------------------------------------------------------- families


# Every family's hint is asked of the same sentence in turn: the lexicon holds the
# sentence read lower-cased, and which hint words occur in it (``gates.Lexicon``).
_lower = LEXICON.lower


def _hinted(hint: Trie, sentence: str) -> bool:
    return hint.occurs(_lower(sentence))


def _suffix_target(sentence: str, end: int) -> str:
    """The clause before a suffix cue: "…，周五前完成的要求不算了" → "周五前完成"."""
    head = sentence[:end]
    return _CLAUSE_MARK.split(head)[-1][-50:]


def revocation(sentence: str, seq: int, ctx: Context) -> RevocationUnit | None:
    if not _hinted(patterns.HINT_REVOKE, sentence):
        return None
    m = _REVOKE.search(sentence, _lower(sentence))
    if m is None:
        return None
    if m.group("suffix") is not None:
        target_text: str | None = _suffix_target(sentence, m.start("suffix"))
    else:
        target_text = next((g for g in m.groups() if g and g.strip()), None)
    if target_text is None and m.group().strip().lower() in (
        "no longer",
        "not anymore",
        "anymore",
        "any more",
    ):
        target_text = patterns.REVOKE.sub(" ", sentence)
    target_text = _TARGET_LEAD.sub("", (target_text or "").strip(" ，,。.")).strip()
    target_text = _TARGET_TRAIL.sub("", target_text).strip() or target_text
    match = ctx.best_match(ctx.revocable, target_text) if target_text else None
    if match is not None:
        target: str | None = match.key
    elif target_text:
        target = target_text
    elif ctx.revocable:
        # "scratch that" / "算了" with no object: the latest thing said.
        target = ctx.revocable[-1].key
    else:
        return None
    return RevocationUnit(text=clip(sentence, TEXT_CHARS), target=target, source_seqs=[seq])


def high_stakes(sentence: str, seq: int) -> HighStakesUnit | None:
    if not _hinted(patterns.HINT_HIGH_STAKES, sentence):
        return None
    for category, pattern in _HIGH_STAKES:
        if pattern.matches(sentence, _lower(sentence)):
            # Keep a card or account number recognisable, never whole.
            text = patterns.LONG_DIGITS.sub(lambda m: "****" + m.group(1), sentence)
            cat: HighStakesCategory = category  # type: ignore[assignment]
            return HighStakesUnit(
                text=clip(text, TEXT_CHARS), category=cat, source_seqs=[seq], emphasized=True
            )
    return None


def explicit_goal(sentence: str, seq: int, following: str | None) -> GoalUnit | None:
    if not _hinted(patterns.HINT_GOAL, sentence):
        return None
    m = patterns.GOAL_EXPLICIT.search(sentence)
    if m is None:
        return None
    text = next((g for g in m.groups() if g and g.strip()), None) or following
    # "Change of plans: my goal is now X" — the innermost statement is the goal.
    while text and (inner := patterns.GOAL_EXPLICIT.search(text)) is not None:
        nested = next((g for g in inner.groups() if g and g.strip()), None)
        if not nested or nested == text:
            break
        text = nested
    if not text or len(normalize(text)) < 3:
        return None
    return GoalUnit(text=clip(text.strip(), TEXT_CHARS), explicit=True, source_seqs=[seq])


def todo_done(sentence: str, seq: int, ctx: Context) -> TodoUnit | None:
    if not ctx.todos or not _hinted(patterns.HINT_TODO_DONE, sentence):
        return None
    m = patterns.TODO_DONE.search(sentence)
    if m is None:
        return None
    text = next((g for g in m.groups() if g), "")
    ref = ctx.best_match(ctx.todos, text)
    if ref is None:
        return None
    return TodoUnit(text=ref.text, key=ref.key, status="done", source_seqs=[seq])


def _clean_value(value: str) -> str:
    value = _VALUE_LEAD.sub("", value.strip())
    return patterns.VALUE_CUT.sub("", value).strip(" \"'“”`")


def _clean_name(name: str) -> str | None:
    name = _NAME_LEAD.sub("", _HEDGE.sub("", name.strip())).strip(" \"'“”`")
    name = patterns.ZH_CLAUSE_LEAD.sub("", name).lstrip("把将 ")
    if not name or len(name) > 32 or len(name.split()) > 4 or patterns.PARAM_NAME_STOP.match(name):
        return None
    if patterns.CONSTRAINT_GATED.matches(name):  # "只能用 CPU": 只能 is a rule cue, not a parameter
        return None
    return name


def _param(name: str, value: str, old: str | None, seq: int) -> ParameterUnit | None:
    clean_name, clean_value = _clean_name(name), _clean_value(value)
    if clean_name is None or not clean_value or normalize(clean_name) == normalize(clean_value):
        return None
    previous = _clean_value(old) if old else None
    return ParameterUnit(
        name=clean_name, value=clip(clean_value, 80), previous=previous or None, source_seqs=[seq]
    )


def parameters(sentence: str, seq: int, ctx: Context) -> list[ParameterUnit]:
    return [] if proposes(sentence) else _settings(sentence, seq, ctx)


def _settings(sentence: str, seq: int, ctx: Context) -> list[ParameterUnit]:
    if not _hinted(patterns.HINT_PARAMETER, sentence):
        return []
    found: list[ParameterUnit | None] = []
    for clause in _CLAUSE.split(sentence):
        if _NEGATION.search(clause):
            continue  # "不要把 X 改成 Y" is a constraint, not a change
        stripped = patterns.ZH_CLAUSE_LEAD.sub("", clause.strip().rstrip("。.!！"))
        m = patterns.ZH_SET.search(stripped)
        if m and not _bare_use_in_word(stripped, m):
            found.append(_param(m["name"], m["value"], m["old"], seq))
    corrected = (
        patterns.ZH_CORRECTED.search(sentence) if "，" in sentence or "," in sentence else None
    )
    if corrected and not _NEGATION.search(corrected["name"]):
        found.append(_param(corrected["name"], corrected["value"], None, seq))
    for m in patterns.EN_SET.finditer(sentence):
        if not _NEGATION.search(sentence[: m.start()]):
            found.append(_param(m["name"], m["value"], m["old"], seq))
    for m in patterns.EN_SHOULD_BE.finditer(sentence):
        found.append(_param(m["name"], m["value"], None, seq))
    # "only use X for Y" is a rule, not a setting
    if not patterns.CONSTRAINT_GATED.matches(sentence):
        for m in patterns.EN_USE_AS.finditer(sentence):
            found.append(_param(m["name"], m["value"], None, seq))
    for m in patterns.INSTEAD_OF.finditer(sentence):
        value = m["value"] or m["value2"] or m["value3"]
        old = m["old"] or m["old2"] or m["old3"]
        owner = ctx.param_with_value(_clean_value(old))
        if owner is not None:
            found.append(_param(owner[0], value, owner[1], seq))
    if "://" not in sentence and "==" not in sentence:
        for m in patterns.ASSIGN.finditer(sentence):
            found.append(_param(m["name"], m["value"], None, seq))
    m = patterns.COLON_PAIR.match(sentence)
    # "订单号：ORD-1" or "Docs: https://…" name an artifact, not a setting.
    if m and not found and _plausible_pair(m["name"], m["value"]) and not find_artifacts(sentence):
        found.append(_param(m["name"], m["value"], None, seq))
    unique: dict[str, ParameterUnit] = {}
    for unit in found:
        if unit is not None:
            unique[param_key(unit.name)] = unit  # the last mention in a sentence wins
    return list(unique.values())


def _plausible_pair(name: str, value: str) -> bool:
    """ "batch size: 32" is a setting; "quick aside: did you catch the match?" is not.

    A value is a short term, not a question or a sentence; the name's head word
    is not one that introduces speech ("question", "note", "update"…).
    """
    if is_question(value) or is_social(value) or len(value.split()) > 6:
        return False
    # "my train is running late", "孩子对X过敏，体重…": a clause, not a value.
    if _SPEECH_VALUE.match(value) or _CLAUSE.search(value) or len(_CJK_CHARS.findall(value)) > 16:
        return False
    head = name.split()[-1] if name.split() else name
    return (
        patterns.PARAM_NAME_STOP.match(head) is None
        and patterns.PARAM_NAME_STOP.match(name) is None
    )


def _bare_use_in_word(clause: str, m: re.Match[str]) -> bool:
    """True when the set-verb matched is a bare 用/使用/采用 not followed by a value-like token.

    "信用卡号…" or "使用说明" contain 用 but set nothing; "优化器用 AdamW" does.
    """
    verb = clause[m.end("name") : m.start("value")].strip()
    if verb.startswith("从"):
        return False
    if verb.endswith(("用",)) and not verb.startswith(("必须", "应该")):
        return not _VALUE_LIKE.match(clause[m.start("value") :])
    return False


def superseded_constraints(unit: ParameterUnit, ctx: Context) -> list[RevocationUnit]:
    """Retire earlier constraints that pin this parameter to a different value.

    Only a pinned value is retired ("batch size 必须是 32", "optimizer must be
    SGD"): a rule that bounds the parameter by something else ("赔付金额不得高于
    商品售价", "refund must not exceed the order total") still holds after it changes.
    """
    name = normalize(_NAME_LEAD.sub("", unit.name))
    seq = max(unit.source_seqs)
    if len(name) < 2:
        return []
    current = ctx.params.get(param_key(unit.name))
    olds = {normalize(v) for v in (unit.previous, current[1] if current else None) if v}
    revoked = []
    for ref in ctx.constraints:
        body = normalize(ref.text)
        pinned = _NUMBER.search(ref.text) is not None or any(o and o in body for o in olds)
        if ref.seq < seq and pinned and name in body and normalize(unit.value) not in body:
            revoked.append(
                RevocationUnit(
                    text=f"{unit.name} → {unit.value}", target=ref.key, source_seqs=[seq]
                )
            )
    return revoked


def previous_from_constraint(unit: ParameterUnit, ctx: Context) -> str | None:
    name = normalize(_NAME_LEAD.sub("", unit.name))
    for ref in reversed(ctx.constraints):
        if len(name) >= 2 and name in normalize(ref.text):
            number = _NUMBER.search(ref.text.split(unit.name)[-1]) or _NUMBER.search(ref.text)
            if number:
                return number.group().strip()
    return None


def preference(sentence: str, seq: int, emph: bool) -> PreferenceUnit | None:
    if not _PREFERENCE.matches(sentence, _lower(sentence)):
        return None
    return PreferenceUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[seq], emphasized=emph)


def constraint(sentence: str, seq: int, emph: bool) -> ConstraintUnit | None:
    if not _CONSTRAINT_RULE.matches(sentence, _lower(sentence)):
        return None
    if is_question(sentence) and not patterns.REQUEST.search(sentence):
        return None
    # "batch size 必须是 32，学习率设为 3e-4": the second clause is a parameter, not
    # part of the rule (and must not be retired with it when batch size changes).
    clauses = _CLAUSE.split(sentence)
    kept = [c for c in clauses if patterns.CONSTRAINT_GATED.matches(c) or not _sets_parameter(c)]
    text = "，".join(kept) if len(kept) < len(clauses) else sentence
    return ConstraintUnit(text=clip(text, TEXT_CHARS), source_seqs=[seq], emphasized=emph)


def deadline(sentence: str, seq: int, emph: bool) -> ConstraintUnit | None:
    """A milestone with its date, said in passing, binds the work like a rule."""
    if is_question(sentence) or not _hinted(patterns.HINT_MILESTONE, sentence):
        return None
    if patterns.MILESTONE.search(sentence) is None or not DATE_GATED.matches(sentence):
        return None
    if is_social(sentence):
        return None
    return ConstraintUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[seq], emphasized=emph)


def _sets_parameter(clause: str) -> bool:
    stripped = patterns.ZH_CLAUSE_LEAD.sub("", clause.strip().rstrip("。.!！"))
    return bool(
        patterns.ZH_SET.search(stripped)
        or patterns.EN_SET.search(clause)
        or patterns.ASSIGN.search(clause)
    )


def _weighs_setting(question: str, ctx: Context) -> bool:
    """Whether a proposal names a setting ("… raise the page limit to 15?", "… make the
    X 25% instead of 10%?"), read as the parameter rules or the value-change rules
    read a statement."""
    # Without its proposing words: "要不要" is no negation, "should we" no name.
    statement = patterns.PROPOSAL.sub(" ", question.rstrip("?？ ")).strip()
    if _settings(statement, 0, ctx):
        return True
    change = value_change(statement)
    return change is not None and change.name is not None


def _prerequisite_matches(sentence: str) -> list[re.Match[str]]:
    if not _hinted(patterns.HINT_PREREQUISITE, sentence):
        return []
    return [m for m in patterns.PREREQUISITE.finditer(sentence) if any(m.groups())]


def prerequisites(sentence: str, matches: list[re.Match[str]] | None = None) -> list[str]:
    found = []
    for m in _prerequisite_matches(sentence) if matches is None else matches:
        text = next((g for g in m.groups() if g), "").strip(" ，,。.")
        if text:
            found.append(clip(text, 80))
    return found


def _todo_action(text: str, start: int, waits: list[re.Match[str]]) -> str:
    """The action of a todo, without the condition it waits on.

    "关闭工单，等顾客确认收到换货之后再关" → "关闭工单"; "book the transfer once you
    have my landing time" → "book the transfer". ``start`` is where ``text``
    begins in the sentence the prerequisite matches were found in.
    """
    cut = len(text)
    for m in waits:
        at = m.start() - start
        if 0 < at < cut and any(m.group(g) for g in _CONDITION_GROUPS):
            cut = at
    head = text[:cut].rstrip(" ，,；;：:")
    # "once", "after", "等" have been cut at; a dangling connective is not the action.
    head = _TODO_TAIL.sub("", head).strip(" ，,")
    head = patterns.TODO_TEXT_LEAD.sub("", head)
    return head if len(normalize(head)) >= 2 else text


def todo(sentence: str, seq: int, emph: bool) -> TodoUnit | None:
    if is_question(sentence) or not _hinted(patterns.HINT_TODO, sentence):
        return None
    m = patterns.TODO.search(sentence)
    if m is None:
        return None
    group = next((i for i, g in enumerate(m.groups(), 1) if g), None)
    if group is None:
        return None
    raw = m.group(group)
    text = raw.strip(" ，,。.：:")
    start = m.start(group) + (len(raw) - len(raw.lstrip(" ，,。.：:")))
    lead = _TODO_LEAD.match(text)
    if lead is not None:
        text, start = text[lead.end() :], start + lead.end()
    waits = _prerequisite_matches(sentence)
    text = _todo_action(text, start, waits)
    if len(normalize(text)) < 2:
        return None
    return TodoUnit(
        text=clip(text, TEXT_CHARS),
        missing_prerequisites=prerequisites(sentence, waits),
        source_seqs=[seq],
        emphasized=emph,
    )


def blocker(sentence: str, seq: int) -> BlockerUnit | None:
    if is_question(sentence) or not _BLOCKER.matches(sentence, _lower(sentence)):
        return None
    return BlockerUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[seq])


def decision(sentence: str, seq: int) -> DecisionUnit | None:
    if is_question(sentence) or not _DECISION.matches(sentence, _lower(sentence)):
        return None
    return DecisionUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[seq])


def user_pending(sentence: str, seq: int) -> PendingUnit | None:
    if (
        not _hinted(patterns.HINT_USER_PENDING, sentence)
        or patterns.USER_PENDING.search(sentence) is None
    ):
        return None
    return PendingUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[seq])


def fact(sentence: str, seq: int) -> FactUnit | None:
    if is_question(sentence) or not has_amount_or_date(sentence) or is_social(sentence):
        return None
    return FactUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[seq])


def speech_units(
    sentence: str, seq: int, ctx: Context, *, turn_emphasized: bool, following: str | None
) -> tuple[list[Unit], bool]:
    """Units of one user/system sentence and whether any rule explained it."""
    emph = emphasized(sentence, turn_emphasized)
    # A decision left open waits on someone: pending, and not also a rule or a request.
    sequenced = _SEQUENCE_LEAD.match(sentence) is not None and todo(sentence, seq, emph)
    deferred = None if sequenced else deferral(sentence, seq)
    if deferred is not None:
        return [deferred], True
    revoke = revocation(sentence, seq, ctx)
    if revoke is not None:
        return [revoke], True
    if proposes(sentence) and _weighs_setting(sentence, ctx):
        # "Should we raise X to 15?": an open proposal, not a value (nor a rule).
        return [PendingUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[seq])], True
    units: list[Unit] = []
    pinned = None if is_question(sentence) else high_stakes(sentence, seq)
    if pinned is not None:
        units.append(pinned)
    goal = explicit_goal(sentence, seq, following)
    if goal is not None:
        return [*units, goal], True
    done = todo_done(sentence, seq, ctx)
    if done is not None:
        return [*units, done], True
    for param in parameters(sentence, seq, ctx):
        if param.previous is None:
            previous = previous_from_constraint(param, ctx)
            if previous and normalize(previous) != normalize(param.value):
                param = param.model_copy(update={"previous": previous})
        units.append(param)
        units.extend(superseded_constraints(param, ctx))
    for family in (preference(sentence, seq, emph), constraint(sentence, seq, emph)):
        if family is not None:
            units.append(family)
    if not any(u.kind in ("constraint", "parameter") for u in units):
        due = deadline(sentence, seq, emph)
        units += [due] if due is not None else []
    has_constraint = any(u.kind == "constraint" for u in units)
    for extra in (
        todo(sentence, seq, emph),
        None if has_constraint else blocker(sentence, seq),
        decision(sentence, seq),
        user_pending(sentence, seq),
    ):
        if extra is not None:
            units.append(extra)
    if pinned is not None and len(units) == 1:
        return units, True
    if not units:
        found = fact(sentence, seq)
        return ([found] if found else []), False
    return units, True

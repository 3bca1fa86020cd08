"""RuleExtractor: the deterministic, bilingual default extractor (no LLM).

It walks the turns oldest first:

* tool calls are paired with their results (``tools.py``) into actions and
  artifacts; long results are summarised, never copied;
* user and system speech goes sentence by sentence through the rule families
  of ``sentence.py``; the first substantive user request becomes the goal when
  there is none;
* assistant speech only contributes what the assistant is *waiting for*
  (questions, requests for approval — not generic offers such as "let me know
  if you'd like more" or "还有什么需要帮忙的吗"), its stated next steps and
  blockers — never its claims of what happened, which must come from tool results;
* a user reply right after an assistant question resolves it when it answers
  it: a yes or no for a confirmation ("好的", "yes, go ahead"); for a which/what
  question, one of the options it offered ("window or aisle?" → "Aisle,
  please."), or a short reply that is not itself a new request;
* a successful tool call whose name matches an open todo closes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.compression.extract import patterns
from app.compression.extract.base import MOVED_ON
from app.compression.extract.changes import apart_from, change_units
from app.compression.extract.context import Context, Ref
from app.compression.extract.deferral import deferral, is_bare, is_deferral
from app.compression.extract.entities import find_artifacts
from app.compression.extract.gates import LEXICON
from app.compression.extract.identifiers import identifier_units
from app.compression.extract.proposal import is_question
from app.compression.extract.sentence import (
    TEXT_CHARS,
    blocker,
    clean,
    emphasized,
    is_noise,
    is_offer,
    speech_units,
    strip_bullet,
    todo,
)
from app.compression.extract.summary import summary_unit
from app.compression.extract.tools import action_units
from app.compression.state import (
    ActionUnit,
    ArtifactUnit,
    DecisionUnit,
    GoalUnit,
    HighStakesUnit,
    ParameterUnit,
    PendingUnit,
    ResolutionUnit,
    TaskState,
    TodoUnit,
    Unit,
)
from app.compression.text import clip, detect_language, item_key, normalize, word_set
from app.core.turns import TurnView

_CODE_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_CONSTRAINT_LED = re.compile(
    r"^(?:please\s+)?(?:never|don'?t|do not|always|only|avoid|make sure|ensure|be sure)\b"
    r"|^(?:请|麻烦)?(?:不要|别|务必|一定|千万|必须|只)",
    re.IGNORECASE,
)
_TOOL_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_MAX_SENTENCES_PER_TURN = 200
# What the sentence rules see of one sentence, and the artifact patterns of one turn:
# a longer "sentence" is a paste, not speech, and every pattern's cost grows with it.
MAX_SENTENCE_CHARS = 2_000
MAX_ARTIFACT_SCAN_CHARS = 20_000
_LAST_CLAUSE = re.compile(r"[,，:：;；]")
_OR = re.compile(r"(?<!\s)\s++or\s+|还是|或者", re.IGNORECASE)
_QUESTION_WORDS = word_set(
    "which what when where who how should shall would could do you prefer want like use "
    "哪个 哪家 哪些 什么 怎么 是否 需要 喜欢 想要 您 你 我"
)
_ANSWER_CHARS = 120
_CJK = re.compile(r"[\u4e00-\u9fff]")
# How a change of choice is recorded (changes.change_units): "B instead of A", "改为B（不再是A）".
_REPLACED_CHOICE = re.compile(r" instead of (?P<old>.+)$|（不再是(?P<old2>[^）]+)）$")
# User replies after which an unanswered agent question is taken as moved past.
MOVED_PAST_REPLIES = 2
# A user turn that only defers, answers or pins something has not moved on.
_NOT_MOVING_ON = frozenset(("pending", "resolution", "high_stakes", "summary", "artifact"))


class RuleExtractor:
    name = "rules"

    async def extract(self, turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
        return extract_units(turns, state)


def extract_units(turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
    """Synchronous core of ``RuleExtractor.extract`` (pure; usable without an event loop)."""
    ctx = Context.from_state(state, turns[0].seq if turns else None)
    passed_over: dict[str, int] = {}
    held = _put_off(state)
    actions = action_units(turns)
    units: list[Unit] = []
    spoken: list[tuple[TurnView, str]] = []
    for turn in turns:
        if turn.role == "tool" or not turn.content:
            continue
        # Each turn is split once: the splitter and the cleaning are a good share
        # of the cost of a long slice of speech.
        raw = raw_sentences(turn.content)
        sentences = _cleaned(raw)
        if turn.role == "assistant":
            found = _assistant_units(turn, sentences, ctx)
        elif turn.role == "user":
            spoken += [(turn, sentence) for sentence in sentences]
            asked = [r.key for r in ctx.answerable]
            found = _user_units(turn, raw, sentences, ctx)
            if any(u.kind == "pending" for u in found):
                held.update(asked)  # "let me check first": the question stays open
            if moves_on(sentences, found):
                found += _moved_past(ctx, passed_over, held, turn.seq)
        elif turn.role == "system":
            found = _speech_units(turn, sentences, ctx, allow_goal=False)
        else:
            continue
        units.extend(found)
        units.extend(_text_artifacts(turn))
    units.extend(actions)
    units.extend(_todos_closed_by_tools(actions, ctx))
    units = _dedupe(units)
    language = state.language or detect_language(t.content for t in turns if t.role != "tool")
    note = summary_unit(turns, spoken, units, state, language)
    return [*units, note] if note is not None else units


def raw_sentences(text: str) -> list[str]:
    """Sentences as written (code blocks removed: code is not speech)."""
    text = _CODE_FENCE.sub(" ", text)
    parts = (
        strip_bullet(p[:MAX_SENTENCE_CHARS]).strip()
        for p in patterns.SENTENCE_SPLIT.split(text)
        if p
    )
    return [p for p in parts if p][:_MAX_SENTENCES_PER_TURN]


def split_sentences(text: str) -> list[str]:
    """Sentences with leading fillers ("OK, …", "好的，…") removed, empty ones dropped."""
    return _cleaned(raw_sentences(text))


def _cleaned(raw: list[str]) -> list[str]:
    return [c for c in (clean(p) for p in raw) if c]


# ------------------------------------------------------------------------- speakers


def _emit(ctx: Context, units: list[Unit]) -> list[Unit]:
    for unit in units:
        ctx.record(unit)
    return units


def _user_units(turn: TurnView, raw: list[str], sentences: list[str], ctx: Context) -> list[Unit]:
    units: list[Unit] = []
    asked = bool(ctx.answerable)
    if ctx.answerable and raw and not _puts_off(raw[0]):
        # The raw sentence: "Yes." is exactly the filler that cleaning removes.
        resolutions, pure = _resolutions(raw[0], turn, ctx.answerable)
        units.extend(resolutions)
        if resolutions:
            ctx.pending = [p for p in ctx.pending if p not in ctx.answerable]
        if pure and sentences and clean(raw[0]) == sentences[0]:
            sentences = sentences[1:]
    ctx.answerable = []
    content = turn.content or ""
    found = _speech_units(turn, sentences, ctx, allow_goal=True)
    if not any(u.kind == "pending" for u in found):
        # A deferral the sentence splitter cut in two ("…what Dr. Ng thinks…").
        whole = deferral(clip(content, 600), turn.seq) if len(sentences) > 1 else None
        found += [whole] if whole is not None else []
    if not asked:
        # "OK, maybe later" after a remark: nothing was asked, nothing is named.
        found = [u for u in found if not (isinstance(u, PendingUnit) and _bare_deferral(u.text))]
    # Identifiers the user states, unless a pinned fact already holds them whole.
    pinned = " ".join(u.text for u in found if isinstance(u, HighStakesUnit))
    for sentence in raw:
        units.extend(u for u in identifier_units(sentence, turn.seq) if _value(u) not in pinned)
    olds = [normalize(u.previous) for u in found if isinstance(u, ParameterUnit) and u.previous]
    if olds:
        # The parameter rules read the change; the sentence is not also a rule or a
        # decision still naming the old value as if it held.
        return units + [u for u in found if not _restates(u, olds)]
    changed = change_units(content, turn.seq, ctx, "zh" if _CJK.search(content) else "en")
    if not changed:
        return units + found
    # A change of mind is neither a new rule nor a new request: only what must never
    # be lost (pinned facts, open questions) comes from its sentences too, and a
    # pinned sentence that states the change is pinned as the change itself.
    kept = [_as_change(u, changed) for u in found if u.kind in ("high_stakes", "pending")]
    # A setting said in another sentence of the turn still holds.
    kept += [u for u in found if isinstance(u, ParameterUnit) and apart_from(u, changed)]
    return units + _emit(ctx, changed) + kept


def replies_resolve(state: TaskState, replies: Sequence[TurnView]) -> list[ResolutionUnit]:
    """What the user's replies after ``state`` (the user turns of the next slice, oldest
    first) resolve of the questions it holds open, as ``extract_units`` resolves them:
    the first reply answers a question asked just before, or holds the asked ones open
    by putting them off (``_user_units``); an agent's question that the replies then
    move past twice expires (``_moved_past``).

    The assistant turns between the replies are not read: they ask questions of their
    own, never answer these. Replies after the first are told apart by their sentences
    alone (``moves_on`` without units): a reply that is all small talk states no unit
    that moves on, since the sentence rules skip small talk.
    """
    if not replies or not state.open_pending():
        return []
    first = replies[0]
    ctx = Context.from_state(state, first.seq)
    held = _put_off(state)
    asked = [r.key for r in ctx.answerable]
    raw = raw_sentences(first.content or "")
    sentences = _cleaned(raw)
    found = _user_units(first, raw, sentences, ctx)
    if any(u.kind == "pending" for u in found):
        held.update(asked)
    resolved = [u for u in found if isinstance(u, ResolutionUnit)]
    passed_over: dict[str, int] = {}
    for reply in replies:
        said = found if reply is first else ()
        lines = sentences if reply is first else split_sentences(reply.content or "")
        if moves_on(lines, said):
            resolved += _moved_past(ctx, passed_over, held, reply.seq)
    return resolved


def moves_on(sentences: Sequence[str], found: Sequence[Unit]) -> bool:
    """Whether a user turn moves the conversation on from an open question: anything
    but small talk, a bare answer, a deferral or a pinned fact."""
    substantive = any(not is_noise(x) for x in sentences)
    return substantive or any(u.kind not in _NOT_MOVING_ON for u in found)


def _resolutions(first: str, turn: TurnView, open_refs: list[Ref]) -> tuple[list[Unit], bool]:
    """Resolution units for the questions a reply answers, and whether the reply is only that."""
    cue = patterns.AFFIRM.match(first) or patterns.NEGATE.match(first)
    if cue is not None:
        targets = open_refs
        rest = first[cue.end() :]
        pure = len(normalize(rest)) <= 12 and not patterns.CONSTRAINT_GATED.matches(first)
    else:
        # A reply that addresses an open question answers it; a yes/no confirmation
        # needs a yes or no.
        targets = [r for r in open_refs if r.choice and _addresses(first, r.text)]
        pure = False
    answer = clip(first, _ANSWER_CHARS)
    units: list[Unit] = [
        ResolutionUnit(answer=answer, target=ref.key, source_seqs=[turn.seq]) for ref in targets
    ]
    return units, pure and bool(units)


def _bare_deferral(text: str) -> bool:
    return is_deferral(text) and is_bare(text)


def _puts_off(first: str) -> bool:
    """Whether a reply's first sentence puts the question off rather than answering it.

    "OK, let me ask my manager first", "Wait — I'll check my calendar", "好的，我先问问主管",
    "等等，我再想想": the leading "OK"/"wait" only acknowledges; nothing is decided. A yes
    that goes on to ask for something ("Yes, book it once the hotel confirms") answers.
    """
    cue = patterns.AFFIRM.match(first) or patterns.NEGATE.match(first)
    rest = first[cue.end() :].lstrip(" ,，、.。!！—-") if cue is not None else first
    if not rest or not is_deferral(rest):
        return False
    affirmed = cue is not None and patterns.AFFIRM.match(first) is not None
    return not (affirmed and (patterns.REQUEST.search(rest) or patterns.IMPERATIVE.search(rest)))


def _options(question: str) -> list[frozenset[str]]:
    """The alternatives a question offers: "…, window or aisle?" → {window}, {aisle}."""
    clause = _LAST_CLAUSE.split(question.rstrip("?？ "))[-1]
    parts = [p for p in _OR.split(clause) if p.strip()]
    if len(parts) < 2:
        parts = [p for p in _OR.split(question.rstrip("?？ ")) if p.strip()]
    return [word_set(p) for p in parts] if len(parts) >= 2 else []


def _addresses(reply: str, question: str) -> bool:
    """Whether a reply answers an open question rather than moving on.

    "Aisle, please." answers "Which seat, window or aisle?"; "Show me hotels
    near Shinjuku." answers nothing: it is the next request.
    """
    if is_noise(reply) or len(reply.split()) > 40 or len(reply) > 200:
        return False
    words = word_set(reply)
    options = _options(question)
    if options:
        return any(words & option for option in options)
    echoed = len(words & (word_set(question) - _QUESTION_WORDS))
    if is_question(reply) or patterns.REQUEST.search(reply) or patterns.IMPERATIVE.search(reply):
        # A new instruction, unless it echoes the question ("Deploy eu-west-1 first").
        return echoed >= 2
    # A short reply to an open question is its answer; a long one must stay on topic.
    short = len(reply.split()) <= 6 and len(normalize(reply)) <= 24
    return short or echoed > 0


def _speech_units(
    turn: TurnView, sentences: list[str], ctx: Context, *, allow_goal: bool
) -> list[Unit]:
    units: list[Unit] = []
    candidate: tuple[int, str] | None = None
    for i, sentence in enumerate(sentences):
        LEXICON.read(sentence)  # the families' words in it, found at once
        if is_noise(sentence):
            continue
        following = sentences[i + 1] if i + 1 < len(sentences) else None
        found, explained = speech_units(
            sentence, turn.seq, ctx, turn_emphasized=turn.emphasized, following=following
        )
        units.extend(_emit(ctx, found))
        if (
            allow_goal
            and candidate is None
            and not ctx.goal_set
            and _goal_like(sentence, explained)
        ):
            candidate = (i, sentence)
    if candidate is not None and not ctx.goal_set:
        i, text = candidate
        nxt = sentences[i + 1] if i + 1 < len(sentences) else ""
        if len(text) < 25 and nxt and not is_noise(nxt) and not _CONSTRAINT_LED.search(nxt):
            text = f"{text} {nxt}"
        goal = GoalUnit(
            text=clip(text, TEXT_CHARS), source_seqs=[turn.seq], emphasized=turn.emphasized
        )
        # The request is the goal; the same sentence kept as a fact would only repeat it.
        units = [u for u in units if not (u.kind == "fact" and u.text in text)]
        units.extend(_emit(ctx, [goal]))
    return units


def _goal_like(sentence: str, explained: bool) -> bool:
    if _CONSTRAINT_LED.search(sentence) or patterns.RHETORICAL.search(sentence):
        return False
    if patterns.REQUEST.search(sentence):
        return True
    substantive = len(sentence.split()) >= 5 or len(normalize(sentence)) >= 10
    return not explained and substantive


def _assistant_units(turn: TurnView, sentences: list[str], ctx: Context) -> list[Unit]:
    units: list[Unit] = []
    for sentence in sentences:
        if is_noise(sentence) or patterns.RHETORICAL.search(sentence) or is_offer(sentence):
            continue  # "Let me know if you'd like more options": nothing is awaited
        if is_question(sentence) or patterns.AWAITING.search(sentence):
            # "Which seat?" / "Do you have a preference?" are answered by any reply;
            # "Shall I book it?" only by a yes or a no.
            choice = patterns.CHOICE_QUESTION.search(
                sentence
            ) is not None or not patterns.CONFIRM_CUE.search(sentence)
            unit = PendingUnit(text=clip(sentence, TEXT_CHARS), source_seqs=[turn.seq])
            ref = Ref(item_key("pending", unit.text), unit.text, turn.seq, choice)
            ctx.pending.append(ref)
            ctx.answerable.append(ref)
            units.append(unit)
            continue
        emph = emphasized(sentence, turn.emphasized)
        found = todo(sentence, turn.seq, emph) or blocker(sentence, turn.seq)
        if found is not None:
            units.extend(_emit(ctx, [found]))
    return units


# ------------------------------------------------------------------------- cross-turn


def _restates(unit: Unit, olds: list[str]) -> bool:
    text = getattr(unit, "text", None)
    if unit.kind in ("pending", "high_stakes") or not isinstance(text, str):
        return False
    return any(old and old in normalize(text) for old in olds)


_CHANGE_RECORD = {"en": "{name}: {value} (was {old})", "zh": "{name}：{value}（原为 {old}）"}


def _as_change(unit: Unit, changed: list[Unit]) -> Unit:
    """A pinned sentence still quoting the old value, rewritten as the change's record
    ("date: 7 May (was 3 May)"), so that nothing kept for good states the old value
    as if it held."""
    if not isinstance(unit, HighStakesUnit):
        return unit
    body = normalize(unit.text)
    old: str | None
    for change in changed:
        if isinstance(change, ParameterUnit) and change.previous:
            old, record = change.previous, _CHANGE_RECORD["zh" if _CJK.search(unit.text) else "en"]
            text = record.format(name=change.name, value=change.value, old=old)
        elif isinstance(change, DecisionUnit):
            old, text = _replaced(change.text), change.text
        else:
            continue
        if old and normalize(old) in body:
            return unit.model_copy(update={"text": text})
    return unit


def _replaced(decision: str) -> str | None:
    m = _REPLACED_CHOICE.search(decision)
    return (m["old"] or m["old2"]) if m else None


def _value(unit: HighStakesUnit) -> str:
    return unit.text.split(": ", 1)[-1]


def _moved_past(
    ctx: Context, passed_over: dict[str, int], held: set[str], seq: int
) -> list[ResolutionUnit]:
    """An agent question the user has twice moved past (with anything but small
    talk, a bare answer or a deferral) is no longer awaited.

    Only what the agent asked for expires — a question, or a request phrased as
    one ("Please confirm the payment method.", "Let me know which flight…") — and
    not one the user put off ("let me check first"): what the user left open stays
    pending until it is resolved.
    """
    closed: list[ResolutionUnit] = []
    for ref in list(ctx.pending):
        if ref.seq >= seq or ref.key in held or not _asked(ref.text):
            continue
        if is_deferral(ref.text):
            continue  # the user's own "can we leave X open?" awaits them, not a reply
        passed_over[ref.key] = passed_over.get(ref.key, 0) + 1
        if passed_over[ref.key] >= MOVED_PAST_REPLIES:
            answer = MOVED_ON["zh" if _CJK.search(ref.text) else "en"]
            closed.append(ResolutionUnit(answer=answer, target=ref.key, source_seqs=[seq]))
            ctx.pending.remove(ref)
    return closed


def _put_off(state: TaskState) -> set[str]:
    """Keys of agent questions the user put off in an earlier slice: the user's
    deferral came right after the question ("Shall I add it?" — "let me think
    about it") and is still open, so the question stays open with it."""
    open_items = state.open_pending()
    deferred = [min(p.source_seqs) for p in open_items if p.source_seqs and is_deferral(p.text)]
    return {
        p.key
        for p in open_items
        if _asked(p.text) and any(p.last_seen < seq <= p.last_seen + 2 for seq in deferred)
    }


def _asked(text: str) -> bool:
    """A question, or a request for an answer ("please confirm…", "let me know…")."""
    return is_question(text) or patterns.AWAITING.search(text) is not None


def _text_artifacts(turn: TurnView) -> list[Unit]:
    content = _CODE_FENCE.sub(" ", (turn.content or "")[:MAX_ARTIFACT_SCAN_CHARS])
    return [
        ArtifactUnit(artifact_kind=f.kind, value=f.value, label=f.label, source_seqs=[turn.seq])
        for f in find_artifacts(content)
    ]


def _tool_words(tool: str) -> frozenset[str]:
    words = {w.lower() for w in _TOOL_WORDS.findall(tool)}
    return frozenset(w for w in words if len(w) >= 3)


def _todos_closed_by_tools(actions: list[Unit], ctx: Context) -> list[Unit]:
    """A successful ``search_hotels`` call closes the open todo "search hotels in Kyoto"."""
    closed: list[Unit] = []
    for action in actions:
        if not isinstance(action, ActionUnit) or action.status != "done":
            continue
        words = _tool_words(action.tool)
        if len(words) < 2:
            continue  # "search" alone says too little about which todo it served
        seq = max(action.source_seqs)
        for open_todo in list(ctx.todos):
            if open_todo.seq < seq and words <= word_set(open_todo.text):
                closed.append(
                    TodoUnit(
                        text=open_todo.text, key=open_todo.key, status="done", source_seqs=[seq]
                    )
                )
                ctx.todos.remove(open_todo)
    return closed


def _dedupe(units: list[Unit]) -> list[Unit]:
    seen: set[str] = set()
    unique: list[Unit] = []
    for unit in sorted(units, key=lambda u: max(u.source_seqs)):
        ident = unit.model_dump_json()
        if ident not in seen:
            seen.add(ident)
            unique.append(unit)
    return unique

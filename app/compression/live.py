"""What the live turns changed since the state was rendered: a read-time overlay.

The task state is rendered once per compression and speaks for the turns up to
its title's "through turn N". The turns after N stay live, raw, until the next
compression. When one of them changes a value the state holds ("bump the
release tag to v2.4", "预算改成 9000"), the state's line is stale; and when the
packer leaves that turn out of a small context, the agent is shown the old
value as current and nothing says otherwise. So the context read re-reads the
live user turns for parameter and goal changes with the extractor's own rules,
and rewrites what the rendering says: the parameter's line as the next
compression will render it ("- release tag: v2.4 (was v2.3)"), every other line
that still names the old value marked the way the renderer marks it, and a goal
the user restated explicitly ("my goal is now …") as "Goal: new (was old)".

Only what the state already shows is rewritten: a value the state never showed
cannot be shown stale. The cost is kept off the read path's common case: a
sentence is only read closely when it has a parameter rule's cue word and names
a parameter or one of the current values, or has a goal rule's cue word; what a
turn says is memoised by its text. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from app.compression.extract.changes import apart_from, change_units
from app.compression.extract.context import Context
from app.compression.extract.patterns import HINT_GOAL as GOAL_CUES
from app.compression.extract.patterns import HINT_PARAMETER as PARAMETER_CUES
from app.compression.extract.rules import split_sentences
from app.compression.extract.sentence import is_noise, speech_units
from app.compression.render import LABELS, annotate, change_of
from app.compression.state import GoalUnit, ParameterUnit, Unit
from app.compression.text import clip, normalize, param_key
from app.compression.untrusted import one_line

_CJK = re.compile(r"[\u4e00-\u9fff]")
_ZH_TITLE = LABELS["zh"]["title"].split("{", 1)[0]
# Line starts that are the ledger's own record of a call: its arguments and result
# are what the call was given and returned, not a claim about the present.
_CALL_MARKS = tuple(LABELS[lang][k] for lang in LABELS for k in ("done", "failed", "called"))


@dataclass(frozen=True, slots=True)
class LiveTurn:
    seq: int
    role: str
    content: str | None
    # What the worker stored as the turn's units (``live_notes.turn_units`` as JSON text)
    # when it indexed the turn; None while it has not.
    units: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """A parameter the state shows as ``old`` that a live turn set to ``value``; for
    the goal, ``name`` is empty."""

    name: str
    value: str
    old: str
    seq: int


@dataclass(frozen=True, slots=True)
class _Param:
    line: int
    name: str
    value: str


def _language(rendered: str) -> str:
    return "zh" if rendered.startswith(_ZH_TITLE) else "en"


def _params(lines: Sequence[str], lang: str) -> dict[str, _Param]:
    """The rendered "Current parameters" lines, by parameter key."""
    lab = LABELS[lang]
    try:
        start = lines.index(lab["params"]) + 1
    except ValueError:
        return {}
    sep = lab["param"].split("{name}", 1)[1].split("{value}", 1)[0]
    # What the renderer appends after a value: its former value, a change mark.
    marks = (lab["was"].split("{old}", 1)[0], lab["changed"].split("{name}", 1)[0])
    found: dict[str, _Param] = {}
    for i in range(start, len(lines)):
        line = lines[i]
        if not line.startswith("- ") or sep not in line:
            break
        name, _, value = line[2:].partition(sep)
        for mark in marks:
            value = value.split(mark, 1)[0]
        value = value.strip()
        if name and value:
            found[param_key(name)] = _Param(i, name, value)
    return found


def _goal(lines: Sequence[str], lang: str) -> tuple[int, str] | None:
    """The rendered goal line's index and the goal it states."""
    lab = LABELS[lang]
    head = lab["goal"].split("{text}", 1)[0]
    was = lab["was"].split("{old}", 1)[0]
    for i, line in enumerate(lines[:3]):  # right after the title
        if line.startswith(head):
            return i, line[len(head) :].split(was, 1)[0].strip()
    return None


def may_change(rendered: str) -> bool:
    """Whether the rendering shows anything a live turn can make stale (parameters
    or a goal); the overlay has nothing to do otherwise."""
    lines = rendered.split("\n", 3)
    return any(f"\n{LABELS[lang]['params']}\n" in rendered for lang in LABELS) or (
        _goal(lines, _language(rendered)) is not None
    )


def live_changes(rendered: str, turns: Iterable[LiveTurn]) -> list[Change]:
    """What the user changed in ``turns`` (the live turns after the state's last
    compressed turn) of the parameters and the goal ``rendered`` shows, newest each."""
    if not rendered or not may_change(rendered):
        return []
    lang = _language(rendered)
    lines = rendered.split("\n")
    params = _params(lines, lang)
    goal = _goal(lines, lang)
    current = {k: (p.name, p.value) for k, p in params.items()}
    held: _Held = tuple(sorted(current.items()))
    newest: dict[str, tuple[str, int]] = {}
    new_goal: tuple[str, int] | None = None
    for turn in sorted(turns, key=lambda t: t.seq):
        text = turn.content
        if turn.role != "user" or not text:
            continue
        lowered = text.lower()
        # Cheap gates: a turn that names no parameter nor a current value changes
        # none; one without a goal cue restates no goal.
        named = bool(held) and _names_any(normalize(text), _needles(held))
        if not named and not (goal is not None and GOAL_CUES.search(lowered)):
            continue
        said = _turn_units(text, held if named else ())
        for name, value in said.parameters:
            key = param_key(name)
            current[key] = (name, value)
            if key in params:
                newest[key] = (value, turn.seq)
        held = tuple(sorted(current.items())) if said.parameters else held
        new_goal = (said.goal, turn.seq) if said.goal else new_goal
    changes = []
    for key, (value, seq) in newest.items():
        shown = params[key]
        if normalize(value) != normalize(shown.value):
            # Text from a turn stays one line of data.
            changes.append(Change(shown.name, one_line(value, 80), shown.value, seq))
    if goal is not None and new_goal is not None and normalize(new_goal[0]) != normalize(goal[1]):
        changes.append(Change("", one_line(new_goal[0], 240), goal[1], new_goal[1]))
    return changes


_Held = tuple[tuple[str, tuple[str, str]], ...]  # parameter key -> (name, value), sorted


@dataclass(frozen=True, slots=True)
class _Said:
    parameters: tuple[tuple[str, str], ...]  # (name, value)
    goal: str | None


@lru_cache(maxsize=256)
def _needles(held: _Held) -> frozenset[str]:
    found = (normalize(n) for _, (name, value) in held for n in (name, value))
    return frozenset(n for n in found if len(n) >= 2)


def _names_any(flat: str, needles: frozenset[str]) -> bool:
    return any(n in flat for n in needles)


# Each read of a session's context sees mostly the same live turns as the one
# before: what a turn says is read once per process (pure, keyed by its text and
# the values it is read against).
@lru_cache(maxsize=4096)
def _turn_units(text: str, held: _Held) -> _Said:
    """The parameters and the explicit goal the rule extractor takes from one user
    turn (its ``_user_units``: sentence rules first; a change of mind read from the
    whole turn when they found no change), reading only the sentences that pass
    the gates of ``live_changes``."""
    needles = _needles(held)
    ctx = Context(goal_set=True, params=dict(held))
    sentences = split_sentences(text)
    found: list[Unit] = []
    for i, sentence in enumerate(sentences):
        lowered = sentence.lower()
        named = PARAMETER_CUES.search(lowered) and _names_any(normalize(sentence), needles)
        if not (named or GOAL_CUES.search(lowered)) or is_noise(sentence):
            continue
        following = sentences[i + 1] if i + 1 < len(sentences) else None
        units, _ = speech_units(sentence, 0, ctx, turn_emphasized=False, following=following)
        found += units
    goal = next((u.text for u in reversed(found) if isinstance(u, GoalUnit) and u.explicit), None)
    params = [u for u in found if isinstance(u, ParameterUnit)]
    if held and not any(p.previous for p in params):
        language = "zh" if _CJK.search(text) else "en"
        changed = change_units(text, 0, ctx, language)
        if changed:  # a change of mind: its own reading, and settings said apart from it
            params = [u for u in params if apart_from(u, changed)] + [
                u for u in changed if isinstance(u, ParameterUnit)
            ]
    return _Said(tuple((p.name, p.value) for p in params), goal)


def apply_changes(rendered: str, changes: Sequence[Change]) -> str:
    """``rendered`` with each changed parameter's line rewritten ("- x: new (was old)")
    and other lines naming an old value marked as changed, as the renderer does."""
    if not changes or not rendered:
        return rendered
    lang = _language(rendered)
    lab = LABELS[lang]
    lines = rendered.split("\n")
    params = _params(lines, lang)
    goal = _goal(lines, lang)
    rewritten: set[int] = set()
    for change in changes:
        if not change.name:
            if goal is not None:
                line = lab["goal"].format(text=change.value)
                lines[goal[0]] = line + lab["was"].format(old=clip(goal[1], 80))
                rewritten.add(goal[0])
            continue
        shown = params.get(param_key(change.name))
        if shown is None:
            continue
        line = lab["param"].format(name=shown.name, value=change.value)
        lines[shown.line] = line + lab["was"].format(old=shown.value)
        rewritten.add(shown.line)
    marks = [m for c in changes if c.name and (m := change_of(c.name, c.value, c.old)) is not None]
    if marks:
        for i in range(1, len(lines)):
            if i not in rewritten and not lines[i].startswith(_CALL_MARKS):
                lines[i] = annotate(lines[i], marks, lab)
    return "\n".join(lines)

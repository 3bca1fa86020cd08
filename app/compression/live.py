"""What the live turns changed since the state was rendered: a read-time overlay.

The task state is rendered once per compression and speaks for the turns up to
its title's "through turn N". The turns after N stay live, raw, until the next
compression. When one of them changes a value the state holds ("bump the
release tag to v2.4", "预算改成 9000"), the state's line is stale; and when the
packer leaves that turn out of a small context, the agent is shown the old
value as current and nothing says otherwise. So the context read re-reads the
live user turns for parameter changes with the extractor's own rules, and
rewrites what the rendering says: the parameter's line as the next compression
will render it ("- release tag: v2.4 (was v2.3)"), and every other line that
still names the old value is marked the way the renderer marks it.

Only parameters the state already holds are rewritten: a value the state never
showed cannot be shown stale. The cost is kept off the read path's common case:
nothing runs unless the rendering has parameters, and a turn is only read
closely when its text names a parameter or one of the current values.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from app.compression.extract.changes import change_units
from app.compression.extract.context import Context
from app.compression.extract.patterns import HINT_PARAMETER as PARAMETER_CUES
from app.compression.extract.rules import split_sentences
from app.compression.extract.sentence import is_noise, speech_units
from app.compression.render import LABELS, annotate, change_of
from app.compression.state import ParameterUnit, Unit
from app.compression.text import normalize, param_key
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


@dataclass(frozen=True, slots=True)
class Change:
    """A parameter the state shows as ``old`` that a live turn set to ``value``."""

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
    was = lab["was"].split("{old}", 1)[0]
    found: dict[str, _Param] = {}
    for i in range(start, len(lines)):
        line = lines[i]
        if not line.startswith("- ") or sep not in line:
            break
        name, _, rest = line[2:].partition(sep)
        value = rest.split(was, 1)[0].strip()
        if name and value:
            found[param_key(name)] = _Param(i, name, value)
    return found


def has_parameters(rendered: str) -> bool:
    """Whether the rendering shows parameters (the overlay has nothing to do otherwise)."""
    return any(f"\n{LABELS[lang]['params']}\n" in rendered for lang in LABELS)


def live_changes(rendered: str, turns: Iterable[LiveTurn]) -> list[Change]:
    """The parameters of ``rendered`` that the user changed in ``turns`` (the live
    turns after the state's last compressed turn), newest value each."""
    if not has_parameters(rendered):
        return []
    params = _params(rendered.split("\n"), _language(rendered))
    if not params:
        return []
    current = {k: (p.name, p.value) for k, p in params.items()}
    held: _Held = tuple(sorted(current.items()))
    newest: dict[str, tuple[str, int]] = {}
    for turn in sorted(turns, key=lambda t: t.seq):
        text = turn.content
        # Cheap gate: a turn that names no parameter and no current value changes none.
        if turn.role != "user" or not text or not _names_any(normalize(text), _needles(held)):
            continue
        found = _turn_parameters(text, held)
        for name, value in found:
            key = param_key(name)
            current[key] = (name, value)
            if key in params:
                newest[key] = (value, turn.seq)
        held = tuple(sorted(current.items())) if found else held
    changes = []
    for key, (value, seq) in newest.items():
        shown = params[key]
        if normalize(value) != normalize(shown.value):
            # Text from a turn stays one line of data.
            changes.append(Change(shown.name, one_line(value, 80), shown.value, seq))
    return changes


_Held = tuple[tuple[str, tuple[str, str]], ...]  # parameter key -> (name, value), sorted


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
def _turn_parameters(text: str, held: _Held) -> tuple[tuple[str, str], ...]:
    """``(name, value)`` of the parameters the rule extractor takes from one user
    turn (its ``_user_units``: sentence rules first; a change of mind read from the
    whole turn when they found no change). A sentence that names no parameter or
    value, or has none of the parameter rules' cue words, is not read."""
    needles = _needles(held)
    ctx = Context(goal_set=True, params=dict(held))
    sentences = split_sentences(text)
    found: list[Unit] = []
    for i, sentence in enumerate(sentences):
        if not (
            PARAMETER_CUES.search(sentence.lower()) and _names_any(normalize(sentence), needles)
        ):
            continue
        if is_noise(sentence):
            continue
        following = sentences[i + 1] if i + 1 < len(sentences) else None
        units, _ = speech_units(sentence, 0, ctx, turn_emphasized=False, following=following)
        found += units
    params = [u for u in found if isinstance(u, ParameterUnit)]
    if not any(p.previous for p in params):
        language = "zh" if _CJK.search(text) else "en"
        changed = [u for u in change_units(text, 0, ctx, language) if isinstance(u, ParameterUnit)]
        params = changed or params
    return tuple((p.name, p.value) for p in params)


def apply_changes(rendered: str, changes: Sequence[Change]) -> str:
    """``rendered`` with each changed parameter's line rewritten ("- x: new (was old)")
    and other lines naming an old value marked as changed, as the renderer does."""
    if not changes or not rendered:
        return rendered
    lang = _language(rendered)
    lab = LABELS[lang]
    lines = rendered.split("\n")
    params = _params(lines, lang)
    rewritten: set[int] = set()
    for change in changes:
        shown = params.get(param_key(change.name))
        if shown is None:
            continue
        line = lab["param"].format(name=shown.name, value=change.value)
        lines[shown.line] = line + lab["was"].format(old=shown.value)
        rewritten.add(shown.line)
    marks = [m for c in changes if (m := change_of(c.name, c.value, c.old)) is not None]
    if marks:
        for i in range(1, len(lines)):
            if i not in rewritten and not lines[i].startswith(_CALL_MARKS):
                lines[i] = annotate(lines[i], marks, lab)
    return "\n".join(lines)

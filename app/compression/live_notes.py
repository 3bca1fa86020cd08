"""What the live turns added since the state was rendered: rules, pinned facts, next
steps and open items the packer left out, and questions the user already answered.

``live.py`` rewrites what the rendering shows (a changed value, a restated goal). Two
more things go wrong when a live user turn is left out of a small context:

* a new unit it states — a constraint ("never deploy on Fridays", "每次都要…"), a
  pinned fact or identifier, a next step, an open question of the user's own — is in
  neither the state nor the context until the next compression (``notes_for``:
  the extractor's own reading of the left-out turns, as the next compression renders
  it, added to their sections: ``add_notes``);
* the user's reply to a question the state shows as pending (asked just before the
  compression) does not reach the context, and the question still reads as open; so
  does an agent's question the user has since moved past twice (``answered``: the
  extractor's own rules for a slice's replies, ``rules.replies_resolve``; ``resolve``
  moves it to "Answered: q → a", or drops it, as the renderer shows it);
* a live turn withdraws a rule (a preference, a decision, a next step) the state
  holds ("forget the budget limit", "不用管预算了"), and the state still shows it in
  force (``withdrawn``: the extractor's and the merge's reading of the withdrawal
  against what the state holds in force; ``retire`` moves it under "No longer
  applies:").

A session never compressed has no rendering to add notes to: what its left-out
turns state is rendered alone, as the compressor renders a state (``with_notes``).

Pure: no I/O. What a user turn says is read once: the worker stores it with the turn
when it indexes it (``units_record``), the context read hands it in (``LiveTurn.units``);
a turn not indexed yet, or whose record other rules wrote (``RULES_STAMP``: a digest
of the rules' code, read at import), is read here, once per process (memoised by its text),
until the next job that reads the turn (index, units, compression) stores its record.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import CodeType
from typing import Any

from pydantic import BaseModel, ValidationError

from app.compression.extract.base import MOVED_ON
from app.compression.extract.context import Context
from app.compression.extract.rules import extract_units, replies_resolve
from app.compression.live import LiveTurn
from app.compression.merge import merge
from app.compression.render import LABELS, render
from app.compression.state import (
    Constraint,
    ConstraintUnit,
    Goal,
    HighStakes,
    Pending,
    RevocationUnit,
    TaskState,
    Todo,
    TodoUnit,
    Unit,
    dump_units,
)
from app.compression.text import (
    clip,
    containment,
    detect_language,
    item_key,
    normalize,
)
from app.compression.untrusted import one_line
from app.core.turns import TurnView

_ZH_TITLE = LABELS["zh"]["title"].split("{", 1)[0]
_MOVED_ON = frozenset(MOVED_ON.values())
_THROUGH = re.compile(r"(-?\d+)")
# The sections a rendering is made of, in the renderer's order (``render._sections``).
_ORDER = (
    "constraints",
    "pinned",
    "preferences",
    "actions",
    "params",
    "artifacts",
    "decisions",
    "facts",
    "pending_header",
    "todos",
    "blockers",
    "revoked",
)
# The kinds a left-out live turn adds that the context must not lose before the next
# compression: what the renderer never drops (and what the turn's revocations retire).
_KEPT_KINDS = frozenset(("constraint", "high_stakes", "todo", "pending", "revocation"))
# A state with a goal (a live turn is not read as the session's first request) and one
# rule without words, the latest a bare "scratch that" can withdraw.
_LATEST = "constraint:\u2063"
_WITH_LATEST = TaskState(
    goal=Goal(key="goal", text="goal"),
    constraints=[Constraint(key=_LATEST, text="\u2063")],
)


@dataclass(frozen=True, slots=True)
class Note:
    """A line to add to ``section`` (a ``LABELS`` key) of a rendering."""

    section: str
    line: str


def _language(rendered: str) -> str:
    return "zh" if rendered.startswith(_ZH_TITLE) else "en"


def _through(rendered: str) -> int | None:
    """The last turn the rendering speaks for (its title's "through turn N")."""
    m = _THROUGH.search(rendered.split("\n", 1)[0])
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------ new units


# How many turns' readings a process keeps: more than the live user turns its reads
# visit. Past that, each read of a turn without a record (stored before ingest read
# units, or by other rules) would read it again: ~0.3 ms a turn, 20 ms a long session.
KEPT_READINGS = 16_384


@lru_cache(maxsize=KEPT_READINGS)
def turn_units(text: str) -> tuple[Unit, ...]:
    """The units the rule extractor takes from one user turn of the kinds kept. A bare
    withdrawal ("scratch that", "算了") targets ``_LATEST``: what it withdraws is the
    latest rule or step said before it, known only beside the other turns."""
    units = extract_units([_as_turn(text)], _WITH_LATEST)
    return tuple(u for u in units if u.kind in _KEPT_KINDS)


def _as_turn(text: str) -> TurnView:
    return TurnView(seq=0, role="user", content=text)


def code_digest(source: str) -> str:
    """A digest of what ``source`` computes: its bytecode, names and constants, compiled
    as ``python -OO`` does (without docstrings' text and asserts: an assert only guards),
    and none of its line numbers or file name. An edit of comments, docstrings or layout
    keeps it (adding or removing a whole docstring does not: it is a statement); any
    change of code (a constant, a pattern, a name, a branch) changes it."""
    return hashlib.sha256(
        repr(_canonical(compile(source, "rules", "exec", optimize=2))).encode()
    ).hexdigest()


def _canonical(value: object) -> object:
    """``value`` (a code object or a constant) as a value whose repr is the same in
    every process: without positions, a set's members in a fixed order."""
    if isinstance(value, CodeType):
        return (
            value.co_name,
            value.co_code,
            value.co_exceptiontable,
            value.co_flags,
            value.co_argcount,
            value.co_posonlyargcount,
            value.co_kwonlyargcount,
            value.co_names,
            value.co_varnames,
            value.co_freevars,
            value.co_cellvars,
            tuple(_canonical(c) for c in value.co_consts),
        )
    if isinstance(value, frozenset):
        return ("frozenset", sorted(repr(_canonical(v)) for v in value))
    if isinstance(value, tuple):
        return tuple(_canonical(v) for v in value)
    return value


# The modules of the app the extractor imports, however indirectly: a units record is
# made of their state's units and their text's normalising (``test_rules_stamp`` keeps
# this list whole).
_IMPORTED = (
    "compression/ledger",
    "compression/state",
    "compression/text",
    "core/bounded",
    "core/limits",
    "core/turns",
)
RULES_MODULES = (
    *sorted(Path(extract_units.__code__.co_filename).parent.glob("*.py")),
    *(Path(__file__).parents[1] / f"{name}.py" for name in _IMPORTED),
    Path(__file__),
)


def rules_stamp(paths: Iterable[Path] = RULES_MODULES) -> str:
    """What identifies the rules that read a turn: a digest of the code of the
    extractor's modules, of the modules they import and of this one (the kinds kept,
    the placeholder), by file name. A record stamped by other rules (an upgrade
    changed them) is read again from the text, never trusted; an edit of comments or
    docstrings alone keeps the stamp, so the stored records stay good."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda path: path.name):
        digest.update(f"{path.name}\0{code_digest(path.read_text(encoding='utf-8'))}\n".encode())
    return digest.hexdigest()[:16]


RULES_STAMP = rules_stamp()


def record_of(units: Sequence[Unit]) -> str:
    """``units`` as the JSON text stored with the turn, stamped with the rules that read it."""
    return json.dumps({"rules": RULES_STAMP, "units": dump_units(list(units))}, ensure_ascii=False)


# The record of a turn that states nothing, as stored (Postgres prints jsonb alike).
_NOTHING = record_of(())


def units_record(text: str) -> str:
    """``turn_units(text)`` as stored with the turn (``record_of``; no units: it states none)."""
    return record_of(turn_units(text))


class _Record(BaseModel):
    rules: str
    units: list[Unit]


@lru_cache(maxsize=KEPT_READINGS)
def _recorded(record: str) -> tuple[Unit, ...] | None:
    try:
        stored = _Record.model_validate_json(record)
    except ValidationError:
        return None  # stored by a version whose units no longer load
    return tuple(stored.units) if stored.rules == RULES_STAMP else None


def _units(text: str, record: str | None) -> tuple[Unit, ...]:
    """What a user turn states: its stored record, or, not indexed yet (or its record
    does not load, or other rules wrote it), its reading."""
    if record == _NOTHING:
        return ()  # most turns state nothing
    recorded = None if record is None else _recorded(record)
    return turn_units(text) if recorded is None else recorded


def _carries(turn: LiveTurn) -> bool:
    return (
        turn.role == "user" and bool(turn.content) and bool(_units(turn.content or "", turn.units))
    )


def any_carrier(live: Iterable[LiveTurn]) -> bool:
    """Whether a live user turn states anything ``notes_for`` may add (stops at the
    first: on the read path, most turns need not be read at all)."""
    return any(_carries(t) for t in live)


def notes_for(rendered: str, live: Iterable[LiveTurn], left_out: set[int]) -> list[Note]:
    """Lines for what the live user turns in ``left_out`` (seqs) state that the
    rendering does not show, as the next compression renders them. Every live user
    turn is read, so that a later turn's revocation ("scratch that rule") is applied;
    only what comes from left-out turns alone is added."""
    if not rendered or not left_out:
        return []
    turns = sorted((t for t in live if t.role == "user" and t.content), key=lambda t: t.seq)
    # The left-out turns first: every turn is read only when one of them says something.
    if not any(_carries(t) for t in turns if t.seq in left_out):
        return []
    said = tuple(
        (t.seq, t.content or "", t.units) for t in turns if _units(t.content or "", t.units)
    )
    lang = _language(rendered)
    state = _live_state(said, lang)
    shown = _normalized(rendered)
    lab = LABELS[lang]

    def new(source_seqs: Sequence[int], text: str) -> bool:
        return all(s in left_out for s in source_seqs) and normalize(text) not in shown

    notes: list[Note] = []
    for c in state.active_constraints():
        if new(c.source_seqs, c.text):
            mark = " (!)" if c.emphasized else ""
            notes.append(Note("constraints", f"- {one_line(c.text)}{mark}"))
    for h in state.high_stakes:
        if new(h.source_seqs, h.text):
            notes.append(Note("pinned", f"- {one_line(h.text)}"))
    for p in state.open_pending():
        if new(p.source_seqs, p.text):
            notes.append(Note("pending_header", lab["pending"].format(text=one_line(p.text))))
    for t in state.todos:
        if t.status == "open" and new(t.source_seqs, t.text):
            line = f"- {one_line(t.text)}"
            if t.missing_prerequisites:
                items = lab["sep"].join(one_line(m) for m in t.missing_prerequisites)
                line += lab["missing"].format(items=items)
            notes.append(Note("todos", line))
    return notes


@lru_cache(maxsize=256)
def _normalized(rendered: str) -> str:
    """``normalize(rendered)``, once per rendering (each read of a session asks again)."""
    return normalize(rendered)


def with_notes(
    renderings: Sequence[str], live: Iterable[LiveTurn], left_out: set[int]
) -> list[str] | None:
    """``renderings`` with what the live user turns in ``left_out`` state added
    (``notes_for``); for a session never compressed (no rendering), those notes alone,
    as a state the compressor renders. None: nothing to add."""
    if renderings and renderings[0]:
        notes = notes_for(renderings[0], live, left_out)
        return [add_notes(r, notes) for r in renderings] if notes else None
    alone = _notes_alone(live, left_out)
    return [alone] if alone else None


def _notes_alone(live: Iterable[LiveTurn], left_out: set[int]) -> str:
    """The state of what the left-out live user turns state alone, rendered ("" if
    nothing): its rules, pinned facts, open questions and next steps."""
    turns = sorted((t for t in live if t.role == "user" and t.content), key=lambda t: t.seq)
    if not left_out or not any(_carries(t) for t in turns if t.seq in left_out):
        return ""
    said = tuple(
        (t.seq, t.content or "", t.units) for t in turns if _units(t.content or "", t.units)
    )
    return _rendered_alone(said, frozenset(s for s, _, _ in said if s in left_out))


@lru_cache(maxsize=1024)
def _rendered_alone(said: tuple[tuple[int, str, str | None], ...], left_out: frozenset[int]) -> str:
    """Memoised: a session's reads see the same turns, and leave the same ones out,
    until a new one."""
    lang = detect_language(text for _, text, _ in said)
    state = _live_state(said, lang)

    def alone(item: Constraint | HighStakes | Pending | Todo) -> bool:
        return all(s in left_out for s in item.source_seqs)

    kept = TaskState(
        language=state.language,
        constraints=[c for c in state.active_constraints() if alone(c)],
        high_stakes=[h for h in state.high_stakes if alone(h)],
        pending=[p for p in state.open_pending() if alone(p)],
        todos=[t for t in state.todos if t.status == "open" and alone(t)],
    )
    seqs = [
        s
        for pool in (kept.constraints, kept.high_stakes, kept.pending, kept.todos)
        for i in pool
        for s in i.source_seqs
    ]
    if not seqs:
        return ""
    return render(kept.model_copy(update={"last_seq": max(seqs)}))


_Said = tuple[tuple[int, str, str | None], ...]  # (seq, text, record), oldest first

# The live states read, by the turns they merge and their language, with the latest
# rule or step said (what a later bare withdrawal retires): kept so that the read
# after a new turn merges that turn's units alone onto the state of the turns before
# it (``said[:-1]``), not every live turn again. The key is what the read read, so a
# state kept is never stale: another process's turn, a compaction or a record written
# meanwhile makes another key.
_LIVE_STATES: OrderedDict[tuple[_Said, str], tuple[TaskState, str | None]] = OrderedDict()
LIVE_STATES_KEPT = 1024


def _live_state(said: _Said, lang: str) -> TaskState:
    """What the live user turns ``said`` ((seq, text, record), oldest first) state, merged as
    the next compression merges it; a bare withdrawal retires the latest rule or step
    said before it. Memoised; from the state of all but the newest turn when that is
    kept (merging in seq order, one turn's units after another's, is the same merge)."""
    key = (said, lang)
    kept = _LIVE_STATES.get(key)
    if kept is not None:
        _LIVE_STATES.move_to_end(key)
        return kept[0]
    before = _LIVE_STATES.get((said[:-1], lang)) if said else None
    if before is None:
        state, latest = _fold(TaskState(language="zh" if lang == "zh" else "en"), said, None)
    else:
        state, latest = _fold(before[0], said[-1:], before[1])
    _LIVE_STATES[key] = (state, latest)
    if len(_LIVE_STATES) > LIVE_STATES_KEPT:
        _LIVE_STATES.popitem(last=False)  # the least recently read
    return state


def _fold(state: TaskState, said: _Said, latest: str | None) -> tuple[TaskState, str | None]:
    """``state`` with the units of ``said`` merged (a new state), and the latest rule or
    step said after them (``latest``: the latest before them)."""
    units: list[Unit] = []
    for seq, text, record in said:
        for unit in _units(text, record):
            if isinstance(unit, RevocationUnit) and unit.target == _LATEST:
                if latest is None:
                    continue  # it withdraws something the stored state holds
                unit = unit.model_copy(update={"target": latest})
            units.append(unit.model_copy(update={"source_seqs": [seq]}))
            if isinstance(unit, (ConstraintUnit, TodoUnit)):
                latest = unit.key or item_key(unit.kind, unit.text)
    return merge(state, units), latest


# ------------------------------------------------------------------ withdrawn rules

# The state's pools a live turn can withdraw from (``merge._revocation``), with the
# section each shows in and the status an item in force has there.
_IN_FORCE = (
    ("constraints", "constraints", "active"),
    ("todos", "todos", "open"),
    ("preferences", "preferences", "active"),
    ("decisions", "decisions", "active"),
)


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """An item of ``section`` the state shows in force that a live turn withdrew."""

    section: str
    text: str


def withdraws(rendered: str, live: Iterable[LiveTurn]) -> bool:
    """Whether a live user turn may withdraw something the rendering shows in force
    ("forget the budget limit", "不用管预算了", "scratch that"): only then is what the
    state holds in force read. A withdrawal that names something must name a line of
    the rendering's rules, preferences, decisions or next steps (as the merge matches
    a target); a bare one, said before any live rule or step, withdraws the latest."""
    if not rendered:
        return False
    said = [
        (t.seq, u)
        for t in live
        if t.role == "user" and t.content
        for u in _units(t.content, t.units)
        if isinstance(u, (RevocationUnit, ConstraintUnit, TodoUnit))
    ]
    withdrawals = [(seq, u) for seq, u in said if isinstance(u, RevocationUnit)]
    if not withdrawals:
        return False
    shown: tuple[str, ...] | None = None
    for seq, unit in withdrawals:
        if unit.target == _LATEST:
            if not any(s < seq and not isinstance(u, RevocationUnit) for s, u in said):
                return True
            continue
        shown = _in_force_lines(rendered) if shown is None else shown
        target = unit.target or ""
        if any(max(containment(target, x), containment(x, target)) >= 0.5 for x in shown):
            return True
    return False


@lru_cache(maxsize=256)
def _in_force_lines(rendered: str) -> tuple[str, ...]:
    """The item lines of the rendering's sections a withdrawal retires from (memoised:
    each read of a session asks again)."""
    lab = LABELS[_language(rendered)]
    headers = _headers(lab)
    notes = lab["notes"].split("{", 1)[0]
    lines = rendered.split("\n")
    out: list[str] = []
    for _, section, _ in _IN_FORCE:
        if lab[section] in lines:
            start = lines.index(lab[section])
            out += [x[2:] for x in lines[start + 1 : _section_end(lines, start, headers, notes)]]
    return tuple(out)


def withdrawn(
    rendered: str, in_force: Mapping[str, Sequence[Mapping[str, Any]]], live: Iterable[LiveTurn]
) -> list[Withdrawn]:
    """What the state holds in force (``in_force``: its active rules, preferences and
    decisions, its open next steps, as stored) that the live user turns withdraw, as
    the next compression will: a withdrawal names its target as the extractor reads it
    against the state and the turns before it (``Context.best_match``; a bare "scratch
    that" is the latest thing said), and the merge retires it."""
    through = _through(rendered) if rendered else None
    if through is None or not any(in_force.get(pool) for pool, _, _ in _IN_FORCE):
        return []
    said = tuple(
        sorted(
            (
                (t.seq, t.content, t.units)
                for t in live
                if t.role == "user" and t.content and t.seq > through and _units(t.content, t.units)
            ),
            key=lambda s: s[0],
        )
    )
    if not any(
        isinstance(u, RevocationUnit) for _, text, record in said for u in _units(text, record)
    ):
        return []
    pools = {pool: list(in_force.get(pool) or ()) for pool, _, _ in _IN_FORCE}
    return list(_withdrawn(_Items.of(pools, tuple(pools)), through, said))


@lru_cache(maxsize=1024)
def _withdrawn(
    in_force: _Items, through: int, said: tuple[tuple[int, str, str | None], ...]
) -> tuple[Withdrawn, ...]:
    """Memoised: a session's reads see the same state and turns until either changes."""
    base = TaskState.model_validate({**in_force.items, "last_seq": through})
    ctx = Context.from_state(base, None)
    units: list[Unit] = []
    for seq, text, record in said:
        for unit in _units(text, record):
            unit = unit.model_copy(update={"source_seqs": [seq]})
            if isinstance(unit, RevocationUnit):
                target = _target(ctx, unit.target)
                if target is None:
                    continue
                unit = unit.model_copy(update={"target": target})
            ctx.record(unit)
            units.append(unit)
    merged = merge(base, units)
    out: list[Withdrawn] = []
    for pool, section, status in _IN_FORCE:
        held = {item.key for item in getattr(base, pool) if item.status == status}
        out += [
            Withdrawn(section, item.text)
            for item in getattr(merged, pool)
            if item.key in held and item.status != status
        ]
    return tuple(out)


def _target(ctx: Context, said: str | None) -> str | None:
    """What a withdrawal read from its turn alone targets beside the state: a bare one
    the latest thing in force, a named one the item its words match best (else its
    words, for the merge to match), as ``sentence.revocation`` reads it."""
    if said == _LATEST:
        return ctx.revocable[-1].key if ctx.revocable else None
    match = ctx.best_match(ctx.revocable, said) if said else None
    return match.key if match is not None else said


def retire(rendered: str, items: Sequence[Withdrawn], *, listed: bool = True) -> str:
    """``rendered`` without the withdrawn items' lines, and (``listed``) with each
    under "No longer applies:" as the renderer lists it."""
    if not items or not rendered:
        return rendered
    lang = _language(rendered)
    lab = LABELS[lang]
    headers = _headers(lab)
    notes = lab["notes"].split("{", 1)[0]
    lines = rendered.split("\n")
    gone: list[str] = []
    for item in items:
        if lab[item.section] not in lines:
            continue
        start = lines.index(lab[item.section])
        end = _section_end(lines, start, headers, notes)
        line = f"- {item.text}"
        at = next(
            (i for i in range(start + 1, end) if lines[i] == line or _marked(lines[i], line)),
            None,
        )
        if at is None:
            continue  # a smaller rendering dropped it
        del lines[at]
        if end - start == 2:
            del lines[start]  # the section held only that line
        gone.append(line)
    if gone and listed:
        _insert(lines, lang, "revoked", gone)
    return "\n".join(lines)


def _marked(shown: str, line: str) -> bool:
    """``shown`` is ``line`` with what the renderer appends (" (!)", missing items)."""
    return shown.startswith(line) and shown[len(line) : len(line) + 2] in (" (", "（", " （")


# ------------------------------------------------------------------ answered questions


@dataclass(frozen=True, slots=True)
class Answer:
    question: str
    answer: str


def answered(
    rendered: str, open_pending: Sequence[Mapping[str, Any]], live: Iterable[LiveTurn]
) -> list[Answer]:
    """The questions the rendering shows as pending that the live user replies resolve,
    as the next compression will take them (``rules.replies_resolve``): the first reply
    answers one asked in the last turns before the state's end (a yes or no, or a reply
    that addresses an open choice); an agent's question the replies moved past twice
    is no longer awaited."""
    through = _through(rendered) if rendered and open_pending else None
    if through is None:
        return []
    replies = tuple(
        sorted(
            (t.seq, t.content) for t in live if t.role == "user" and t.content and t.seq > through
        )
    )
    if not replies:
        return []
    return list(_answers(_Items.of(open_pending), through, replies))


@dataclass(frozen=True, slots=True)
class _Items:
    """Stored items, compared and hashed by their keys and the turns they were seen in
    (what a memo must tell apart), carrying them whole."""

    ident: tuple[tuple[str, str, tuple[int, ...]], ...]
    items: Any = field(compare=False, hash=False)

    @classmethod
    def of(cls, items: Any, pools: Sequence[str] = ()) -> _Items:
        rows = (
            [(pool, i) for pool in pools for i in items[pool]]
            if pools
            else [("", i) for i in items]
        )
        ident = tuple(
            (pool, str(i.get("key")), tuple(i.get("source_seqs") or ())) for pool, i in rows
        )
        return cls(ident, items)


@lru_cache(maxsize=1024)
def _answers(
    open_pending: _Items, through: int, replies: tuple[tuple[int, str], ...]
) -> tuple[Answer, ...]:
    """Memoised: a session's reads see the same replies until a new one."""
    state = TaskState.model_validate({"pending": list(open_pending.items), "last_seq": through})
    texts = {p.key: p.text for p in state.pending}
    turns = [TurnView(seq=seq, role="user", content=text) for seq, text in replies]
    found = replies_resolve(state, turns)
    return tuple(Answer(texts[u.target], u.answer) for u in found if u.target in texts)


# ------------------------------------------------------------------ rewriting


def _headers(lab: Mapping[str, str]) -> dict[str, str]:
    return {lab[k]: k for k in _ORDER}


def _section_end(lines: list[str], start: int, headers: Mapping[str, str], notes: str) -> int:
    """The index after the last line of the section whose header is at ``start``."""
    i = start + 1
    while i < len(lines) and lines[i] not in headers and not lines[i].startswith(notes):
        i += 1
    return i


def _insert(lines: list[str], lang: str, section: str, new: Sequence[str]) -> None:
    lab = LABELS[lang]
    headers = _headers(lab)
    notes = lab["notes"].split("{", 1)[0]
    at = {headers[line]: i for i, line in enumerate(lines) if line in headers}
    if section in at:
        end = _section_end(lines, at[section], headers, notes)
        lines[end:end] = list(new)
        return
    later = [at[k] for k in _ORDER[_ORDER.index(section) + 1 :] if k in at]
    end = min(later) if later else len(lines)
    if not later:
        end = next((i for i, line in enumerate(lines) if i and line.startswith(notes)), end)
    lines[end:end] = [lab[section], *new]


def add_notes(rendered: str, notes: Sequence[Note]) -> str:
    """``rendered`` with ``notes`` added at the end of their sections (a section the
    rendering lacks is added where the renderer places it)."""
    if not notes or not rendered:
        return rendered
    lang = _language(rendered)
    lines = rendered.split("\n")
    for section in _ORDER:
        new = [n.line for n in notes if n.section == section]
        if new:
            _insert(lines, lang, section, new)
    return "\n".join(lines)


def resolve(rendered: str, answers: Sequence[Answer]) -> str:
    """``rendered`` with each answered question's "Pending:" line gone and an
    "Answered: q → a" line among the decisions, as the renderer shows it."""
    if not answers or not rendered:
        return rendered
    lang = _language(rendered)
    lab = LABELS[lang]
    lines = rendered.split("\n")
    done = {lab["pending"].format(text=one_line(a.question)) for a in answers}
    kept = [line for line in lines if line not in done]
    if len(kept) == len(lines):
        return rendered  # the rendering does not show them (a smaller tier dropped none)
    header = lab["pending_header"]
    if header in kept:
        i = kept.index(header)
        if i + 1 >= len(kept) or not kept[i + 1].startswith(lab["pending"].split("{", 1)[0]):
            del kept[i]
    # A question the conversation moved past is not shown at all, as the renderer does.
    lines_out = [
        lab["answered"].format(q=clip(one_line(a.question), 100), a=one_line(a.answer))
        for a in answers
        if a.answer not in _MOVED_ON
    ]
    if lines_out:
        _insert(kept, lang, "decisions", lines_out)
    return "\n".join(kept)

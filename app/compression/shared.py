"""The shared state of a task: what its sessions contribute, merged, with attribution.

Several agents work on one task, each in its own session. A contributor's
compression sends the units of the shared sections (goal, constraints, decisions,
write actions, pending confirmations, artifacts) here as well as into its own
state; everything else stays private. Pure: no I/O.

Contributions merge with the rules of one session (``merge.merge``: newest wins
with history, pending append-only, revocations keep). Turn seqs of different
sessions are not comparable, so before merging each contribution's seqs are
mapped onto the task's own clock, in commit order: a later contribution is the
newer one, and within one contribution the turns keep their order. ``credits``
remembers which agent and session (and which of its turns) every tick came from;
an item's attribution is the credits of its ticks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from app.compression.ledger import ToolKind, tool_kind
from app.compression.merge import merge
from app.compression.state import (
    ActionUnit,
    Language,
    ResolutionUnit,
    RevocationUnit,
    TaskState,
    Unit,
)
from app.core.permissions import Section

# Which shared section a unit writes; kinds not listed stay private.
_SECTION_OF: dict[str, Section] = {
    "goal": "goal",
    "constraint": "constraints",
    "decision": "decisions",
    "action": "actions",
    "pending": "pending",
    "artifact": "artifacts",
}


class Credit(BaseModel):
    """One tick of the task clock: the agent, session and turn it came from."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    tick: int
    agent: str
    session: str
    seq: int


class SharedState(BaseModel):
    """The task's merged state, its clock, and where each tick came from."""

    model_config = ConfigDict(extra="ignore")

    state: TaskState = Field(default_factory=TaskState)
    clock: int = 0
    credits: list[Credit] = Field(default_factory=list)


@dataclass(frozen=True)
class Contributor:
    agent: str
    session: str


@dataclass(frozen=True)
class Attribution:
    """Who an item of the shared state came from (every contributor, oldest first)."""

    section: str
    key: str
    text: str
    contributors: list[Credit]


def shared_units(
    units: Iterable[Unit],
    sections: Iterable[Section],
    private: TaskState,
    tool_kinds: Mapping[str, ToolKind] | None = None,
) -> list[Unit]:
    """The units a contributor with write access to ``sections`` adds to the task.

    Only write actions are shared: what an agent looked up is its own working
    state; what it did in the world is everyone's ledger. An answer or a
    revocation that names no target ("yes", "scratch that") meant the session's
    own latest question or statement: ``private`` (the session's state with these
    units merged) tells which, and the unit goes to the task naming it, so that it
    cannot close another agent's question. One that settled nothing shared stays
    private.
    """
    allowed = set(sections)
    kept: list[Unit] = []
    for unit in units:
        if isinstance(unit, ResolutionUnit | RevocationUnit):
            pinned = _pinned(unit, private)
            if pinned is not None and _section_of(pinned, private) in allowed:
                kept.append(pinned)
            continue
        section = _SECTION_OF.get(unit.kind)
        if section is None or section not in allowed:
            continue
        if isinstance(unit, ActionUnit) and tool_kind(unit, tool_kinds) != "write":
            continue
        kept.append(unit)
    return kept


def _pinned(
    unit: ResolutionUnit | RevocationUnit, private: TaskState
) -> ResolutionUnit | RevocationUnit | None:
    """The unit naming the key of what it settled in the session's own state."""
    seq = max(unit.source_seqs)
    settled: list[str]
    if isinstance(unit, ResolutionUnit):
        settled = [p.key for p in private.pending if p.resolved_seq == seq]
    else:
        notes = [*private.constraints, *private.decisions]
        settled = [n.key for n in notes if n.revoked_seq == seq]
    if not settled:
        return None
    return unit.model_copy(update={"target": settled[-1]})


def _section_of(unit: ResolutionUnit | RevocationUnit, private: TaskState) -> Section:
    if isinstance(unit, ResolutionUnit):
        return "pending"
    return "constraints" if any(c.key == unit.target for c in private.constraints) else "decisions"


def contribute(
    shared: SharedState,
    units: Sequence[Unit],
    contributor: Contributor,
    *,
    decay_factor: float = 0.95,
    language: Language | None = None,
) -> SharedState:
    """A new shared state with ``units`` (already filtered) merged in as the newest."""
    if not units:
        return shared
    seqs = sorted({s for u in units for s in u.source_seqs})
    tick_of = {seq: shared.clock + i + 1 for i, seq in enumerate(seqs)}
    on_clock = [
        u.model_copy(update={"source_seqs": [tick_of[s] for s in u.source_seqs]}) for u in units
    ]
    state = merge(
        shared.state,
        on_clock,
        decay_factor=decay_factor,
        language=shared.state.language or language,
    )
    credits = [
        Credit(tick=tick_of[s], agent=contributor.agent, session=contributor.session, seq=s)
        for s in seqs
    ]
    return SharedState(
        state=state, clock=shared.clock + len(seqs), credits=[*shared.credits, *credits]
    )


def _items(state: TaskState) -> Iterable[tuple[str, str, str, list[int]]]:
    """(section, key, text, ticks) of every shared item."""
    if state.goal is not None:
        yield "goal", state.goal.key, state.goal.text, state.goal.source_seqs
    for section in ("constraints", "decisions", "pending"):
        for item in getattr(state, section):
            yield section, item.key, item.text, item.source_seqs
    for action in state.actions:
        yield "actions", action.key, action.tool, action.source_seqs
    for artifact in state.artifacts:
        yield "artifacts", artifact.key, artifact.value, artifact.source_seqs


def attribution(shared: SharedState) -> list[Attribution]:
    """Every item of the shared state with the contributions it came from."""
    by_tick = {c.tick: c for c in shared.credits}
    out = []
    for section, key, text, ticks in _items(shared.state):
        credits = [by_tick[t] for t in sorted(set(ticks)) if t in by_tick]
        out.append(Attribution(section=section, key=key, text=text, contributors=credits))
    return out


def private_view(
    state: TaskState,
    sections: Iterable[Section],
    tool_kinds: Mapping[str, ToolKind] | None = None,
) -> TaskState:
    """A session's own state without what it contributes to the task's shared state
    (that is shown once, in the shared block): what its context renders as private."""
    gone = set(sections)
    view = state.model_copy(deep=True)
    if "goal" in gone:
        view.goal = None
    for section in ("constraints", "decisions", "pending", "artifacts"):
        if section in gone:
            setattr(view, section, [])
    if "actions" in gone:
        view.actions = [a for a in view.actions if tool_kind(a, tool_kinds) != "write"]
    return view


_TITLE = {
    "en": "## Shared task state (all agents of the task)",
    "zh": "## 共享任务状态（本任务所有成员）",
}


def retitled(rendered: str, language: str | None) -> str:
    """A rendering of the shared state under its own title (the renderer's names a turn
    number, which on the task clock means nothing to an agent)."""
    if not rendered:
        return rendered
    _, _, body = rendered.partition("\n")
    return f"{_TITLE.get(language or 'en', _TITLE['en'])}\n{body}"

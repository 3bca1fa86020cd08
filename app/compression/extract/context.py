"""What the rule extractor remembers while it walks a slice of turns.

Rules need a little memory: which confirmations are open (so "yes" resolves
one), which constraints and todos exist (so "scratch that" and "取消…" know
what they revoke), which parameter values are current (so "use Adam instead of
SGD" knows SGD is the optimizer). It starts from the stored state and is
updated with every unit emitted, so it sees earlier turns of the same slice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.compression.state import TaskState, Unit
from app.compression.text import containment, item_key, normalize, param_key


def _asks(text: str) -> bool:
    return text.rstrip(" 。.").endswith(("?", "？", "吗", "呢"))


@dataclass(slots=True)
class Ref:
    key: str
    text: str
    seq: int
    choice: bool = False  # an open question, answerable by any reply (not only yes/no)


@dataclass(slots=True)
class Context:
    goal_set: bool
    pending: list[Ref] = field(default_factory=list)
    answerable: list[Ref] = field(default_factory=list)
    constraints: list[Ref] = field(default_factory=list)
    todos: list[Ref] = field(default_factory=list)
    params: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (name, value)
    revocable: list[Ref] = field(default_factory=list)

    @classmethod
    def from_state(cls, state: TaskState, first_seq: int | None) -> Context:
        ctx = cls(goal_set=state.goal is not None)
        for p in state.open_pending():
            ctx.pending.append(Ref(p.key, p.text, p.last_seen))
        # A question asked in the last turns of the previous slice can be answered
        # by the first user turn of this one.
        if first_seq is not None:
            # Only questions: what the user left open is not answered by the next "ok".
            recent = min(state.last_seq, first_seq) - 3
            ctx.answerable = [r for r in ctx.pending if r.seq >= recent and _asks(r.text)]
        for c in state.active_constraints():
            ctx.constraints.append(Ref(c.key, c.text, c.last_seen))
        ctx.todos = [Ref(t.key, t.text, t.last_seen) for t in state.todos if t.status == "open"]
        ctx.params = {p.key: (p.name, p.value) for p in state.parameters}
        notes = [n for n in state.preferences + state.decisions if n.status == "active"]
        ctx.revocable = sorted(
            ctx.constraints + ctx.todos + [Ref(n.key, n.text, n.last_seen) for n in notes],
            key=lambda r: r.seq,
        )
        return ctx

    def record(self, unit: Unit) -> None:
        seq = max(unit.source_seqs)
        if unit.kind == "goal":
            self.goal_set = True
        elif unit.kind == "constraint":
            ref = Ref(unit.key or item_key("constraint", unit.text), unit.text, seq)
            self.constraints.append(ref)
            self.revocable.append(ref)
        elif unit.kind == "todo" and unit.status == "open":
            ref = Ref(unit.key or item_key("todo", unit.text), unit.text, seq)
            self.todos.append(ref)
            self.revocable.append(ref)
        elif unit.kind == "todo":
            self.todos = [t for t in self.todos if t.key != unit.key]
        elif unit.kind in ("preference", "decision"):
            self.revocable.append(Ref(unit.key or item_key(unit.kind, unit.text), unit.text, seq))
        elif unit.kind == "parameter":
            self.params[param_key(unit.name)] = (unit.name, unit.value)
        elif unit.kind == "revocation" and unit.target:
            self.constraints = [c for c in self.constraints if c.key != unit.target]
            self.todos = [t for t in self.todos if t.key != unit.target]
            self.revocable = [r for r in self.revocable if r.key != unit.target]

    def best_match(self, refs: list[Ref], text: str, threshold: float = 0.5) -> Ref | None:
        """The ref whose words best cover ``text`` (or vice versa), newest on ties."""
        best: tuple[float, int, Ref] | None = None
        for ref in refs:
            score = max(containment(text, ref.text), containment(ref.text, text))
            if score >= threshold and (best is None or (score, ref.seq) > best[:2]):
                best = (score, ref.seq, ref)
        return best[2] if best else None

    def param_with_value(self, value: str) -> tuple[str, str] | None:
        wanted = normalize(value)
        for name, current in self.params.values():
            if wanted and normalize(current) == wanted:
                return name, current
        return None

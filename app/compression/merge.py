"""Merging extracted units into the task state — the only place the state changes.

``merge`` is pure (it returns a new state) and idempotent: applying the same
units twice gives the same state, so a retried compression job is harmless.
The rules, each chosen so an agent never loses or contradicts what it was told:

* **Dedup.** Units with the same key — normalised text (NFKC, casefold, no
  spaces or punctuation) — are one item; with a ``similarity``/``embeddings``
  callable, texts at or above ``semantic_threshold`` are one item too.
* **Newer turn wins.** A parameter or goal set again with a newer seq replaces
  the current value, and the old one moves to ``history`` (rendered as
  superseded). An older value arriving late only lands in history.
* **Append-only pending.** Nothing erases a pending confirmation; only a
  resolution unit resolves it.
* **Revocation keeps.** Revoked constraints (and decisions, preferences) stay,
  marked revoked; cancelled todos stay, marked cancelled. A revocation that
  matches nothing is kept as a decision ("cancel the hotel booking").
* **Decay by distance.** ``activity = decay_factor ** (last_seq - last_seen)``
  for non-core items (facts, decisions, blockers, artifacts, closed todos).
  Deriving it from seqs instead of multiplying on each merge is what keeps
  merging idempotent. Core items (goal, constraints, pending, high-stakes,
  parameters, preferences), the action ledger (done, failed or in-flight
  calls: forgetting one makes an agent repeat it) and open todos (work still
  owed), and emphasized items stay 1.0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from app.compression.diff import diff_summary
from app.compression.state import (
    Action,
    ActionUnit,
    Artifact,
    ArtifactUnit,
    Attempt,
    Constraint,
    ConstraintUnit,
    DecisionUnit,
    Goal,
    GoalUnit,
    HighStakes,
    HighStakesUnit,
    Item,
    Language,
    Note,
    Parameter,
    ParameterUnit,
    Pending,
    PendingUnit,
    ResolutionUnit,
    RevocationUnit,
    SummaryUnit,
    Superseded,
    TaskState,
    Todo,
    TodoUnit,
    Unit,
)
from app.compression.text import (
    action_key,
    containment,
    detect_language,
    item_key,
    normalize,
    param_key,
)

__all__ = ["Embeddings", "Similarity", "diff_summary", "merge", "state_texts", "unit_texts"]

Similarity = Callable[[str, str], float]
Embeddings = Mapping[str, Sequence[float]] | Callable[[str], Sequence[float] | None]

SUMMARY_CHARS = 800
_CANCEL = "cancellation:"  # key prefix of decisions made from unmatched revocations
_FUZZY_TARGET = 0.5
# Same-seq units apply in this order: a revocation or resolution in the same
# turn as the thing it revokes or resolves must come after it.
_ORDER = {
    kind: i
    for i, kind in enumerate(
        (
            "goal",
            "high_stakes",
            "constraint",
            "preference",
            "parameter",
            "action",
            "artifact",
            "decision",
            "fact",
            "blocker",
            "todo",
            "pending",
            "summary",
            "revocation",
            "resolution",
        )
    )
}
_ItemT = TypeVar("_ItemT", bound=Item)


def merge(
    state: TaskState,
    units: Sequence[Unit],
    *,
    decay_factor: float = 0.95,
    through_seq: int | None = None,
    language: Language | None = None,
    similarity: Similarity | None = None,
    embeddings: Embeddings | None = None,
    semantic_threshold: float = 0.82,
) -> TaskState:
    """A new state with ``units`` applied.

    ``through_seq`` is the last turn seq the compression covered (the state's
    decay clock advances to it even when those turns held only chit-chat).
    ``embeddings`` maps a text to its vector (a dict precomputed by the caller,
    or a function); ``similarity`` overrides it with any ``(a, b) -> [0, 1]``.
    """
    new = state.model_copy(deep=True)
    merger = _Merger(new, _similarity_fn(similarity, embeddings), semantic_threshold)
    for unit in sorted(units, key=lambda u: (max(u.source_seqs), _ORDER[u.kind])):
        merger.apply(unit)
    seqs = [max(u.source_seqs) for u in units]
    new.last_seq = max([state.last_seq, *seqs, -1 if through_seq is None else through_seq])
    new.language = language or state.language or _guess_language(units)
    _refresh_activity(new, decay_factor)
    return new


# ----------------------------------------------------------------------- similarity


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


_TEXT_POOLS = (
    "constraints",
    "decisions",
    "todos",
    "pending",
    "preferences",
    "high_stakes",
    "blockers",
    "facts",
)


def unit_texts(units: Sequence[Unit]) -> list[str]:
    """The texts of units that merging may match by meaning."""
    return [u.text for u in units if isinstance(getattr(u, "text", None), str)]  # type: ignore[union-attr]


def state_texts(state: TaskState) -> list[str]:
    texts = [state.goal.text] if state.goal else []
    for pool in _TEXT_POOLS:
        texts += [item.text for item in getattr(state, pool)]
    return texts


# Numbers and codes: two texts that differ in one are never the same item,
# however close their meaning ("budget $35,000" vs "budget $42,000").
_FIGURE = re.compile(r"[0-9][0-9.,:/-]*")


def _figures(text: str) -> frozenset[str]:
    return frozenset(_FIGURE.findall(text))


def _similarity_fn(
    similarity: Similarity | None, embeddings: Embeddings | None
) -> Similarity | None:
    if similarity is not None or embeddings is None:
        return similarity
    lookup: Callable[[str], Sequence[float] | None]
    lookup = embeddings.get if isinstance(embeddings, Mapping) else embeddings

    def by_vectors(a: str, b: str) -> float:
        if _figures(a) != _figures(b):
            return 0.0
        va, vb = lookup(a), lookup(b)
        return _cosine(va, vb) if va is not None and vb is not None else 0.0

    return by_vectors


def _guess_language(units: Sequence[Unit]) -> Language | None:
    texts = [t for u in units if (t := getattr(u, "text", None))]
    return detect_language(texts) if texts else None


# ----------------------------------------------------------------------- applying


def _same_attempt(a: Attempt, b: Attempt) -> bool:
    return a.call_id == b.call_id if b.call_id else a.seq == b.seq


def _seen_before(item: Item, seq: int) -> int | None:
    """The latest seq ≤ ``seq`` at which the item was mentioned (None: not yet)."""
    return max((s for s in item.source_seqs if s <= seq), default=None)


def _union(seqs: list[int], more: Iterable[int]) -> list[int]:
    return sorted(set(seqs).union(more))


class _Merger:
    def __init__(self, state: TaskState, similarity: Similarity | None, threshold: float):
        self.s = state
        self.similarity = similarity
        self.threshold = threshold

    def apply(self, unit: Unit) -> None:
        handler: Callable[[Any], None] = getattr(self, f"_{unit.kind}")
        handler(unit)

    # -- lookup

    def _find(self, items: Sequence[_ItemT], key: str, text: str) -> _ItemT | None:
        for item in items:
            if item.key == key:
                return item
        if self.similarity is None:
            return None
        best: tuple[float, int] | None = None
        for i, item in enumerate(items):
            score = self.similarity(text, item.text)
            if score >= self.threshold and (best is None or score > best[0]):
                best = (score, i)
        return items[best[1]] if best else None

    def _target(self, items: Sequence[_ItemT], target: str) -> _ItemT | None:
        """An item named by key, else the one whose words best match the target text."""
        for item in items:
            if item.key == target:
                return item
        best: tuple[float, int] | None = None
        for i, item in enumerate(items):
            score = max(containment(target, item.text), containment(item.text, target))
            if self.similarity is not None:
                score = max(score, self.similarity(target, item.text))
            if score >= _FUZZY_TARGET and (best is None or score > best[0]):
                best = (score, i)
        return items[best[1]] if best else None

    # -- kinds

    def _goal(self, u: GoalUnit) -> None:
        key, seq = u.key or item_key("goal", u.text), max(u.source_seqs)
        goal = self.s.goal
        if goal is None:
            self.s.goal = Goal(
                key=key,
                text=u.text,
                source_seqs=_union([], u.source_seqs),
                emphasized=u.emphasized,
                since_seq=min(u.source_seqs),
            )
            return
        if self._find([goal], key, u.text) is not None:
            # Only restatements during its reign count: an earlier mention that was
            # ignored while another goal was current must stay ignored on a re-merge.
            if seq >= goal.since_seq:
                goal.source_seqs = _union(goal.source_seqs, u.source_seqs)
                goal.emphasized |= u.emphasized
            return
        if not u.explicit:
            return  # an implicit request never displaces the goal
        if seq > goal.last_seen:
            history = [*goal.history, Superseded(value=goal.text, seq=goal.last_seen)]
            self.s.goal = Goal(
                key=key,
                text=u.text,
                source_seqs=_union([], u.source_seqs),
                emphasized=u.emphasized,
                history=history,
                since_seq=seq,
            )
        elif not any(h.value == u.text for h in goal.history):
            goal.history = sorted(
                [*goal.history, Superseded(value=u.text, seq=seq)], key=lambda h: h.seq
            )

    def _note(self, items: list[Note], u: Any, kind: str, factory: type[Note] = Note) -> None:
        key, seq = u.key or item_key(kind, u.text), max(u.source_seqs)
        found = self._find(items, key, u.text)
        if found is None:
            items.append(
                factory(
                    key=key,
                    text=u.text,
                    source_seqs=_union([], u.source_seqs),
                    emphasized=u.emphasized,
                )
            )
            return
        found.source_seqs = _union(found.source_seqs, u.source_seqs)
        found.emphasized |= u.emphasized
        if found.status == "revoked" and found.revoked_seq is not None and seq > found.revoked_seq:
            found.status, found.revoked_seq = "active", None  # restated after revocation

    def _constraint(self, u: ConstraintUnit) -> None:
        self._note(self.s.constraints, u, "constraint", Constraint)  # type: ignore[arg-type]

    def _preference(self, u: Unit) -> None:
        self._note(self.s.preferences, u, "preference")

    def _decision(self, u: Unit) -> None:
        self._note(self.s.decisions, u, "decision")

    def _blocker(self, u: Unit) -> None:
        self._note(self.s.blockers, u, "blocker")

    def _fact(self, u: Unit) -> None:
        self._note(self.s.facts, u, "fact")

    def _high_stakes(self, u: HighStakesUnit) -> None:
        key = u.key or item_key("high_stakes", u.text)
        found = self._find(self.s.high_stakes, key, u.text)
        if found is None:
            self.s.high_stakes.append(
                HighStakes(
                    key=key,
                    text=u.text,
                    category=u.category,
                    source_seqs=_union([], u.source_seqs),
                    emphasized=True,
                )
            )
        else:
            found.source_seqs = _union(found.source_seqs, u.source_seqs)

    def _action(self, u: ActionUnit) -> None:
        key, seq = action_key(u.tool, u.arguments), max(u.source_seqs)
        attempt = Attempt(call_id=u.call_id, seq=min(u.source_seqs), status=u.status)
        found = next((a for a in self.s.actions if a.key == key), None)
        if found is None:
            self.s.actions.append(
                Action(
                    key=key,
                    tool=u.tool,
                    arguments=dict(u.arguments),
                    status=u.status,
                    result_summary=u.result_summary,
                    result_type=u.result_type,
                    ref_paths=list(u.ref_paths),
                    result_keys=list(u.result_keys),
                    call_id=u.call_id,
                    at=u.at,
                    seq=seq,
                    attempts=[attempt],
                    source_seqs=_union([], u.source_seqs),
                    emphasized=u.emphasized,
                )
            )
            return
        if not any(_same_attempt(a, attempt) for a in found.attempts):
            found.attempts = sorted(
                [*found.attempts, attempt], key=lambda a: (a.seq, a.call_id or "")
            )
        found.source_seqs = _union(found.source_seqs, u.source_seqs)
        found.repeats = len(found.attempts) - 1
        found.emphasized |= u.emphasized
        # The effect happened if any attempt succeeded; show the newest result of the best status.
        statuses = {a.status for a in found.attempts}
        found.status = next((s for s in ("done", "failed") if s in statuses), "unknown")
        if u.status == found.status and seq >= found.seq:
            found.result_summary, found.result_type = u.result_summary, u.result_type
            found.ref_paths, found.result_keys = list(u.ref_paths), list(u.result_keys)
            found.call_id, found.at, found.seq = u.call_id, u.at, seq

    def _parameter(self, u: ParameterUnit) -> None:
        key, seq = param_key(u.name), max(u.source_seqs)
        found = next((p for p in self.s.parameters if p.key == key), None)
        if found is None:
            history = []
            if u.previous and normalize(u.previous) != normalize(u.value):
                history.append(Superseded(value=u.previous, seq=seq))
            self.s.parameters.append(
                Parameter(
                    key=key,
                    name=u.name,
                    value=u.value,
                    source_seq=seq,
                    history=history,
                    source_seqs=_union([], u.source_seqs),
                    emphasized=u.emphasized,
                )
            )
            return
        found.source_seqs = _union(found.source_seqs, u.source_seqs)
        found.emphasized |= u.emphasized
        if normalize(found.value) == normalize(u.value):
            # source_seq is the latest statement of the current value, so an older
            # contradicting value arriving later cannot displace a restatement.
            found.source_seq = max(found.source_seq, seq)
            return
        # Re-merging must not re-log a value: history is checked by value, not by seq.
        seen = any(normalize(h.value) == normalize(u.value) for h in found.history)
        newer = seq > found.source_seq or (seq == found.source_seq and not seen)
        if newer:
            found.history = [*found.history, Superseded(value=found.value, seq=found.source_seq)]
            found.name, found.value, found.source_seq = u.name, u.value, seq
        elif not seen:
            found.history = sorted(
                [*found.history, Superseded(value=u.value, seq=seq)], key=lambda h: h.seq
            )

    def _artifact(self, u: ArtifactUnit) -> None:
        key = f"artifact:{u.artifact_kind}:{u.value}"
        found = next((a for a in self.s.artifacts if a.key == key), None)
        if found is None:
            self.s.artifacts.append(
                Artifact(
                    key=key,
                    kind=u.artifact_kind,
                    value=u.value,
                    label=u.label,
                    seq=min(u.source_seqs),
                    source_seqs=_union([], u.source_seqs),
                    emphasized=u.emphasized,
                )
            )
        else:
            found.source_seqs = _union(found.source_seqs, u.source_seqs)

    def _todo(self, u: TodoUnit) -> None:
        key, seq = u.key or item_key("todo", u.text), max(u.source_seqs)
        found = self._find(self.s.todos, key, u.text)
        if found is None and u.status == "done":
            found = self._target(
                [t for t in self.s.todos if _seen_before(t, seq) is not None], u.text
            )
        if found is None:
            self.s.todos.append(
                Todo(
                    key=key,
                    text=u.text,
                    source_seqs=_union([], u.source_seqs),
                    emphasized=u.emphasized,
                    status=u.status,
                    missing_prerequisites=list(u.missing_prerequisites),
                    closed_seq=seq if u.status == "done" else None,
                )
            )
            return
        restated_after = found.last_seen > seq
        found.source_seqs = _union(found.source_seqs, u.source_seqs)
        found.emphasized |= u.emphasized
        for missing in u.missing_prerequisites:
            if missing not in found.missing_prerequisites:
                found.missing_prerequisites.append(missing)
        if u.status == "done" and found.status == "open" and not restated_after:
            found.status, found.closed_seq = "done", seq
        elif u.status == "done" and found.status == "done" and found.closed_seq is not None:
            # Done again later: "done" at a seq beats "open" at the same seq.
            found.closed_seq = max(found.closed_seq, seq)
        elif u.status == "open" and found.closed_seq is not None and seq > found.closed_seq:
            found.status, found.closed_seq = "open", None  # asked for again after closing

    def _pending(self, u: PendingUnit) -> None:
        key, seq = u.key or item_key("pending", u.text), max(u.source_seqs)
        found = self._find(self.s.pending, key, u.text)
        if found is None:
            self.s.pending.append(
                Pending(
                    key=key,
                    text=u.text,
                    source_seqs=_union([], u.source_seqs),
                    emphasized=u.emphasized,
                )
            )
            return
        found.source_seqs = _union(found.source_seqs, u.source_seqs)
        if found.resolved_seq is not None and seq > found.resolved_seq:
            # Asked again after an answer: it is open again (never silently closed).
            found.status, found.resolution, found.resolved_seq = "pending", None, None

    def _resolution(self, u: ResolutionUnit) -> None:
        seq = max(u.source_seqs)
        asked = [p for p in self.s.pending if _seen_before(p, seq) is not None]
        if u.target is None:
            # The latest question asked before the answer (whatever its status, so
            # re-merging picks the same one).
            found = max(asked, key=lambda p: _seen_before(p, seq) or 0, default=None)
        else:
            found = self._target(asked, u.target)
        # A question asked again after this answer stays open.
        if found is not None and found.status == "pending" and found.last_seen <= seq:
            found.status, found.resolution, found.resolved_seq = "resolved", u.answer, seq

    def _revocation(self, u: RevocationUnit) -> None:
        seq = max(u.source_seqs)
        pools: list[list[Any]] = [
            self.s.constraints,
            self.s.todos,
            self.s.preferences,
            self.s.decisions,
        ]
        # Decisions that unmatched revocations became are not revocable themselves:
        # on a re-merge they would otherwise capture "scratch that".
        candidates = [
            i
            for pool in pools
            for i in pool
            if _seen_before(i, seq) is not None and not i.key.startswith(_CANCEL)
        ]
        if u.target is None:
            found = max(candidates, key=lambda i: _seen_before(i, seq) or 0, default=None)
        else:
            found = self._target(candidates, u.target)
        if found is None:
            # Nothing to revoke: "cancel the hotel booking" is itself a decision.
            decision = DecisionUnit(
                text=u.text,
                source_seqs=u.source_seqs,
                emphasized=u.emphasized,
                key=item_key(_CANCEL[:-1], u.text),
            )
            self._note(self.s.decisions, decision, "decision")
            return
        if found.last_seen > seq:
            return  # restated after the revocation: the restatement stands
        if isinstance(found, Todo):
            if found.status == "open":
                found.status, found.closed_seq = "cancelled", seq
        elif found.status == "active":
            found.status, found.revoked_seq = "revoked", seq

    def _summary(self, u: SummaryUnit) -> None:
        if normalize(u.text) in normalize(self.s.summary):
            return
        text = f"{self.s.summary} {u.text}".strip()
        # Keep the newest part: older context is already folded into the structure.
        self.s.summary = text[-SUMMARY_CHARS:]


# ----------------------------------------------------------------------- decay

_CORE = ("constraints", "pending", "high_stakes", "parameters", "preferences", "actions")
_DECAYING = ("artifacts", "decisions", "todos", "blockers", "facts")


def _refresh_activity(state: TaskState, factor: float) -> None:
    for name in _CORE:
        for item in getattr(state, name):
            item.activity = 1.0
    if state.goal is not None:
        state.goal.activity = 1.0
    for name in _DECAYING:
        for item in getattr(state, name):
            distance = max(0, state.last_seq - item.last_seen)
            core = item.emphasized or (isinstance(item, Todo) and item.status == "open")
            item.activity = 1.0 if core else round(factor**distance, 6)

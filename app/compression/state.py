"""The task state and the cognitive units that build it.

Two families of models live here:

* ``Unit`` — what an extractor emits for a slice of turns. A tagged union on
  ``kind`` with ``extra="forbid"`` and strict scalar types, because the LLM
  extractor asks a model for ``{"units": [...]}`` and must reject anything
  that is not exactly this shape (``units_json_schema()`` is that contract).
* ``TaskState`` — the merged, JSON-serialisable state a session carries. It is
  stored as JSONB (``model_dump(mode="json")``) and read back with
  ``model_validate``; it ignores unknown keys so that states written by a newer
  version still load.

Every state item has a stable ``key`` (dedup identity), ``source_seqs`` (the
turns it came from, so nothing is invented), ``emphasized`` (pinned by the
user) and ``activity`` (1.0 = just mentioned; decays with turns elapsed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from app.compression.text import param_key
from app.core.bounded import JsonBudget, clip_fields
from app.core.limits import NAME_CHARS

Language = Literal["zh", "en"]
ResultType = Literal["object", "list", "text", "number", "boolean", "null", "empty", "error"]
ActionStatus = Literal["done", "failed", "unknown"]
ArtifactKind = Literal["id", "booking_ref", "path", "url", "table", "email"]
HighStakesCategory = Literal["allergy", "medical", "payment", "account", "identity", "other"]


# --------------------------------------------------------------------------- units

# Every text field of a unit is bounded, and ``_UnitBase`` clips its input to these
# bounds (``core/bounded.py``): text copied out of a turn never fails a unit for its
# length, which would fail the compression and every later one of the session.
_SeqList = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1, max_length=1000)]
_Text = Annotated[str, Field(min_length=1, max_length=2000)]
_Short = Annotated[str, Field(max_length=NAME_CHARS)]
_KEY_CHARS = 400
_VALUE_CHARS = 2048  # a pre-signed URL fits; past the usual 2 KB URL limit it is cut


class _UnitBase(BaseModel):
    # strict: an LLM that answers "emphasized": "yes" is wrong, not coerced.
    # hide_input_in_errors: a validation error (logged, kept as a job's last_error)
    # must not quote the text it was given.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, hide_input_in_errors=True)

    source_seqs: _SeqList = Field(description="Seqs of the turns this unit comes from.")
    emphasized: bool = False
    key: str | None = Field(
        default=None,
        max_length=_KEY_CHARS,
        description="Optional dedup key; derived from the text when omitted.",
    )

    @model_validator(mode="before")
    @classmethod
    def _clip_to_limits(cls, data: Any) -> Any:
        return clip_fields(cls, data) if isinstance(data, dict) else data


class GoalUnit(_UnitBase):
    kind: Literal["goal"] = "goal"
    text: _Text
    # An explicit goal change ("my goal is now…", "new task") replaces the goal;
    # an implicit request only sets it when there is none yet.
    explicit: bool = False


class ConstraintUnit(_UnitBase):
    kind: Literal["constraint"] = "constraint"
    text: _Text


class ActionUnit(_UnitBase):
    kind: Literal["action"] = "action"
    # As long as ingest allows a function name: a name that was accepted can be recorded.
    tool: Annotated[str, Field(min_length=1, max_length=NAME_CHARS)]
    arguments: Annotated[dict[str, Any], JsonBudget()] = Field(
        default_factory=dict, description="The call's arguments, long values clipped."
    )
    status: ActionStatus
    result_summary: str = Field(default="", max_length=_VALUE_CHARS)
    result_type: ResultType = "empty"
    ref_paths: list[_Short] = Field(
        default_factory=list,
        max_length=50,
        description="JSONPaths of notable fields in the result, e.g. $.pnr",
    )
    result_keys: list[_Short] = Field(
        default_factory=list, max_length=50, description="Top-level result keys."
    )
    call_id: str | None = Field(default=None, max_length=NAME_CHARS)
    at: datetime | None = Field(default=None, strict=False)


class ParameterUnit(_UnitBase):
    kind: Literal["parameter"] = "parameter"
    name: Annotated[str, Field(min_length=1, max_length=120)]
    value: Annotated[str, Field(min_length=1, max_length=500)]
    previous: str | None = Field(
        default=None, max_length=500, description="The value stated as replaced."
    )


class ArtifactUnit(_UnitBase):
    kind: Literal["artifact"] = "artifact"
    artifact_kind: ArtifactKind
    value: Annotated[str, Field(min_length=1, max_length=_VALUE_CHARS)]
    label: str | None = Field(
        default=None, max_length=NAME_CHARS, description="Where it came from, e.g. 'pnr'."
    )


class DecisionUnit(_UnitBase):
    kind: Literal["decision"] = "decision"
    text: _Text


class TodoUnit(_UnitBase):
    kind: Literal["todo"] = "todo"
    text: _Text
    status: Literal["open", "done"] = "open"
    missing_prerequisites: list[_Short] = Field(default_factory=list, max_length=20)


class PendingUnit(_UnitBase):
    kind: Literal["pending"] = "pending"
    text: _Text


class ResolutionUnit(_UnitBase):
    kind: Literal["resolution"] = "resolution"
    answer: _Text
    target: str | None = Field(
        default=None,
        max_length=_KEY_CHARS,
        description="Key or text of the pending item; None = the latest one.",
    )


class RevocationUnit(_UnitBase):
    kind: Literal["revocation"] = "revocation"
    text: _Text
    target: str | None = Field(
        default=None,
        max_length=_KEY_CHARS,
        description="Key or text of the constraint/todo revoked; None = the latest one.",
    )


class PreferenceUnit(_UnitBase):
    kind: Literal["preference"] = "preference"
    text: _Text


class HighStakesUnit(_UnitBase):
    kind: Literal["high_stakes"] = "high_stakes"
    text: _Text
    category: HighStakesCategory = "other"


class BlockerUnit(_UnitBase):
    kind: Literal["blocker"] = "blocker"
    text: _Text


class FactUnit(_UnitBase):
    """A stated fact with an amount or date that fits no other family."""

    kind: Literal["fact"] = "fact"
    text: _Text


class SummaryUnit(_UnitBase):
    kind: Literal["summary"] = "summary"
    text: _Text


Unit = Annotated[
    GoalUnit
    | ConstraintUnit
    | ActionUnit
    | ParameterUnit
    | ArtifactUnit
    | DecisionUnit
    | TodoUnit
    | PendingUnit
    | ResolutionUnit
    | RevocationUnit
    | PreferenceUnit
    | HighStakesUnit
    | BlockerUnit
    | FactUnit
    | SummaryUnit,
    Field(discriminator="kind"),
]


class UnitBatch(BaseModel):
    """The envelope an LLM extractor must produce: ``{"units": [...]}``."""

    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)

    units: list[Unit]


_UNITS_ADAPTER: TypeAdapter[list[Unit]] = TypeAdapter(list[Unit])


def units_json_schema() -> dict[str, Any]:
    """JSON schema of ``{"units": [...]}``, for structured LLM output."""
    return UnitBatch.model_json_schema()


def parse_units(payload: str | bytes | dict[str, Any]) -> list[Unit]:
    """Validate an extractor payload (JSON text or decoded object) strictly."""
    if isinstance(payload, str | bytes):
        return UnitBatch.model_validate_json(payload).units
    return UnitBatch.model_validate(payload).units


def admit_units(units: list[Unit]) -> tuple[list[Unit], int]:
    """The units that validate against their model as dumped, and how many did not.

    The step between extraction and merge: a unit an extractor built around its
    model's validation (``model_construct``, a mutated copy) is dropped and counted
    here instead of failing the merge, the state's JSON or a later compression.
    """
    kept: list[Unit] = []
    for unit in units:
        try:
            kept.append(_UNIT_ADAPTER.validate_python(unit.model_dump()))
        except (ValidationError, TypeError, ValueError):
            continue
    return kept, len(units) - len(kept)


_UNIT_ADAPTER: TypeAdapter[Unit] = TypeAdapter(Unit)


def dump_units(units: list[Unit]) -> list[dict[str, Any]]:
    """JSON-ready units, e.g. for the compression event record."""
    dumped: list[dict[str, Any]] = _UNITS_ADAPTER.dump_python(units, mode="json")
    return dumped


# --------------------------------------------------------------------------- state


class _StateModel(BaseModel):
    # Lenient on read: JSONB written by another version must still load. A state that
    # does not load fails its job; the error (logged, kept as the job's last_error)
    # must not quote the session's text.
    model_config = ConfigDict(extra="ignore", validate_assignment=False, hide_input_in_errors=True)


class Item(_StateModel):
    key: str
    text: str
    source_seqs: list[int] = Field(default_factory=list)
    emphasized: bool = False
    activity: float = 1.0

    @property
    def last_seen(self) -> int:
        return max(self.source_seqs, default=-1)


class Superseded(_StateModel):
    value: str
    seq: int


class Goal(Item):
    history: list[Superseded] = Field(default_factory=list)
    # The seq at which this goal became current; mentions before it belong to an
    # earlier reign and are not counted (keeps merging idempotent).
    since_seq: int = 0


class Note(Item):
    """A statement that stays until revoked: constraints, decisions, preferences…"""

    # Revoked items are kept (and shown as no longer applying) rather than
    # deleted, so a stale raw turn cannot resurrect them unnoticed.
    status: Literal["active", "revoked"] = "active"
    revoked_seq: int | None = None


class Constraint(Note):
    pass


class Attempt(_StateModel):
    call_id: str | None = None
    seq: int
    status: ActionStatus


class Action(_StateModel):
    key: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: ActionStatus
    result_summary: str = ""
    result_type: ResultType = "empty"
    ref_paths: list[str] = Field(default_factory=list)
    result_keys: list[str] = Field(default_factory=list)
    call_id: str | None = None
    at: datetime | None = None
    seq: int
    repeats: int = 0
    attempts: list[Attempt] = Field(default_factory=list)
    source_seqs: list[int] = Field(default_factory=list)
    emphasized: bool = False
    activity: float = 1.0

    @property
    def last_seen(self) -> int:
        return max(self.source_seqs, default=self.seq)


class Parameter(_StateModel):
    key: str
    name: str
    value: str
    source_seq: int
    history: list[Superseded] = Field(default_factory=list)
    source_seqs: list[int] = Field(default_factory=list)
    emphasized: bool = False
    activity: float = 1.0

    @property
    def last_seen(self) -> int:
        return max(self.source_seqs, default=self.source_seq)


class Artifact(_StateModel):
    key: str
    kind: ArtifactKind
    value: str
    label: str | None = None
    seq: int
    source_seqs: list[int] = Field(default_factory=list)
    emphasized: bool = False
    activity: float = 1.0

    @property
    def last_seen(self) -> int:
        return max(self.source_seqs, default=self.seq)


class Todo(Item):
    status: Literal["open", "done", "cancelled"] = "open"
    missing_prerequisites: list[str] = Field(default_factory=list)
    closed_seq: int | None = None


class Pending(Item):
    status: Literal["pending", "resolved"] = "pending"
    resolution: str | None = None
    resolved_seq: int | None = None


class HighStakes(Item):
    category: HighStakesCategory = "other"


class TaskState(_StateModel):
    goal: Goal | None = None
    constraints: list[Constraint] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    parameters: list[Parameter] = Field(default_factory=list)
    artifacts: list[Artifact] = Field(default_factory=list)
    decisions: list[Note] = Field(default_factory=list)
    todos: list[Todo] = Field(default_factory=list)
    pending: list[Pending] = Field(default_factory=list)
    preferences: list[Note] = Field(default_factory=list)
    high_stakes: list[HighStakes] = Field(default_factory=list)
    blockers: list[Note] = Field(default_factory=list)
    facts: list[Note] = Field(default_factory=list)
    summary: str = ""
    language: Language | None = None
    last_seq: int = -1
    # Smaller renderings of this state, largest first (``render_tiers``), made at
    # compression time so the context read can fit the state to any budget.
    renderings: list[str] = Field(default_factory=list)

    def active_constraints(self) -> list[Constraint]:
        return [c for c in self.constraints if c.status == "active"]

    def open_pending(self) -> list[Pending]:
        return [p for p in self.pending if p.status == "pending"]

    def parameter(self, name: str) -> Parameter | None:
        key = param_key(name)
        return next((p for p in self.parameters if p.key == key), None)

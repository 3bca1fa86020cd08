"""Hypothesis properties of ``merge``: idempotent, never loses constraints or pending
items, and the newest value of a parameter always wins."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.compression.merge import merge
from app.compression.state import (
    ActionUnit,
    ConstraintUnit,
    DecisionUnit,
    FactUnit,
    GoalUnit,
    ParameterUnit,
    PendingUnit,
    PreferenceUnit,
    ResolutionUnit,
    RevocationUnit,
    TaskState,
    TodoUnit,
    Unit,
)

# Small vocabularies so that units collide, restate and contradict each other.
_RULES = [
    "Never book red-eye flights.",
    "never book red-eye flights",
    "Only aisle seats.",
    "千万不要订红眼航班！",
    "不要超过 500 元",
    "Keep it under $800.",
]
_QUESTIONS = ["Shall I book TP204?", "是否需要我预订？", "Which hotel do you want?"]
_TODOS = ["book the hotel", "search flights to Kyoto", "整理数据"]
_NAMES = ["batch size", "batch_size", "lr", "学习率"]
_VALUES = ["16", "32", "64", "3e-4", "AdamW"]

seqs = st.lists(st.integers(0, 40), min_size=1, max_size=2)
constraint = st.builds(
    ConstraintUnit, text=st.sampled_from(_RULES), source_seqs=seqs, emphasized=st.booleans()
)
pending = st.builds(PendingUnit, text=st.sampled_from(_QUESTIONS), source_seqs=seqs)
resolution = st.builds(
    ResolutionUnit,
    answer=st.sampled_from(["yes", "no", "Hilton"]),
    target=st.none() | st.sampled_from(_QUESTIONS),
    source_seqs=seqs,
)
revocation = st.builds(
    RevocationUnit,
    text=st.sampled_from(["scratch that", "取消"]),
    target=st.none() | st.sampled_from(_RULES + _TODOS + ["hotel booking"]),
    source_seqs=seqs,
)
parameter = st.builds(
    ParameterUnit,
    name=st.sampled_from(_NAMES),
    value=st.sampled_from(_VALUES),
    previous=st.none() | st.sampled_from(_VALUES),
    source_seqs=seqs,
)
todo = st.builds(
    TodoUnit,
    text=st.sampled_from(_TODOS),
    status=st.sampled_from(["open", "done"]),
    missing_prerequisites=st.lists(st.sampled_from(["dates", "passport"]), max_size=2),
    source_seqs=seqs,
)
goal = st.builds(
    GoalUnit,
    text=st.sampled_from(["Plan Kyoto trip.", "Train a classifier.", "新任务：报销"]),
    explicit=st.booleans(),
    source_seqs=seqs,
)
action = st.builds(
    ActionUnit,
    tool=st.sampled_from(["book", "search"]),
    arguments=st.sampled_from([{}, {"city": "Kyoto"}]),
    status=st.sampled_from(["done", "failed", "unknown"]),
    result_summary=st.sampled_from(["ok", "error: timeout"]),
    call_id=st.none() | st.sampled_from(["c1", "c2", "c3"]),
    source_seqs=seqs,
)
notes = st.one_of(
    st.builds(
        DecisionUnit, text=st.sampled_from(["Go with Hilton.", "Use Postgres."]), source_seqs=seqs
    ),
    st.builds(PreferenceUnit, text=st.sampled_from(["I prefer trains."]), source_seqs=seqs),
    st.builds(FactUnit, text=st.sampled_from(["Costs $5.", "3月5日出发"]), source_seqs=seqs),
)
any_unit: st.SearchStrategy[Unit] = st.one_of(
    constraint, pending, resolution, revocation, parameter, todo, goal, action, notes
)
unit_lists = st.lists(any_unit, max_size=14)


@settings(max_examples=300, deadline=None, database=None)
@given(before=unit_lists, units=unit_lists, through=st.none() | st.integers(0, 60))
def test_merge_is_idempotent(before: list[Unit], units: list[Unit], through: int | None) -> None:
    state = merge(TaskState(), before)
    once = merge(state, units, through_seq=through)
    assert merge(once, units, through_seq=through) == once
    fresh = merge(TaskState(), units)
    assert merge(fresh, units) == fresh


@settings(max_examples=300, deadline=None, database=None)
@given(before=unit_lists, units=unit_lists)
def test_merge_never_drops_constraints_or_pending(before: list[Unit], units: list[Unit]) -> None:
    state = merge(TaskState(), before)
    new = merge(state, units)
    assert {c.key for c in state.constraints} <= {c.key for c in new.constraints}
    assert {p.key for p in state.pending} <= {p.key for p in new.pending}
    if not any(isinstance(u, RevocationUnit) for u in units):
        active = {c.key for c in new.active_constraints()}
        assert {c.key for c in state.active_constraints()} <= active
    if not any(isinstance(u, ResolutionUnit) for u in units):
        still_open = {p.key for p in new.open_pending()}
        assert {p.key for p in state.open_pending()} <= still_open
    # Pinned and pending items always render, so nothing may drop them either.
    assert all(c.activity == 1.0 for c in new.constraints)


@settings(max_examples=300, deadline=None, database=None)
@given(
    values=st.lists(st.sampled_from(_VALUES), min_size=1, max_size=10),
    data=st.data(),
)
def test_newest_parameter_value_wins(values: list[str], data: st.DataObject) -> None:
    unique_seqs = data.draw(
        st.lists(st.integers(0, 200), min_size=len(values), max_size=len(values), unique=True)
    )
    units = [
        ParameterUnit(
            name=data.draw(st.sampled_from(["batch size", "batch_size", "Batch-Size"])),
            value=v,
            source_seqs=[s],
        )
        for v, s in zip(values, unique_seqs, strict=True)
    ]
    order = data.draw(st.permutations(units))
    split = data.draw(st.integers(0, len(order)))
    state = merge(merge(TaskState(), order[:split]), order[split:])
    [param] = state.parameters
    newest = max(units, key=lambda u: u.source_seqs[0])
    assert param.value == newest.value
    assert param.source_seq == newest.source_seqs[0]
    assert all(h.seq < newest.source_seqs[0] for h in param.history)

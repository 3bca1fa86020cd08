"""Merging units into the state: dedup, conflicts, pending, revocation, decay, diff."""

from __future__ import annotations

import pytest

from app.compression.merge import diff_summary, merge
from app.compression.state import (
    ActionUnit,
    ArtifactUnit,
    ConstraintUnit,
    FactUnit,
    GoalUnit,
    HighStakesUnit,
    ParameterUnit,
    PendingUnit,
    ResolutionUnit,
    RevocationUnit,
    SummaryUnit,
    TaskState,
    TodoUnit,
)


def test_merge_is_pure() -> None:
    state = TaskState()
    new = merge(state, [ConstraintUnit(text="Never fly Ryanair.", source_seqs=[1])])
    assert state == TaskState()
    assert len(new.constraints) == 1 and new is not state


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Never book red-eye flights.", "never book red-eye flights"),
        ("千万不要订红眼航班！", "千万不要订红眼航班"),
        ("Only  book  REFUNDABLE fares", "only book refundable fares."),
        ("不要超过５００元", "不要超过500元"),  # full-width digits (NFKC)
    ],
)
def test_equivalent_texts_dedup(a: str, b: str) -> None:
    state = merge(
        TaskState(),
        [
            ConstraintUnit(text=a, source_seqs=[1]),
            ConstraintUnit(text=b, source_seqs=[5], emphasized=True),
        ],
    )
    [rule] = state.constraints
    assert rule.text == a and rule.source_seqs == [1, 5] and rule.emphasized


def test_semantic_dedup_with_similarity_or_embeddings() -> None:
    units = [
        ConstraintUnit(text="No overnight flights.", source_seqs=[1]),
        ConstraintUnit(text="Avoid red-eye flights.", source_seqs=[2]),
    ]
    assert len(merge(TaskState(), units).constraints) == 2
    same = merge(TaskState(), units, similarity=lambda a, b: 0.9)
    assert len(same.constraints) == 1
    vectors = {"No overnight flights.": [1.0, 0.1], "Avoid red-eye flights.": [0.95, 0.12]}
    assert len(merge(TaskState(), units, embeddings=vectors).constraints) == 1
    assert (
        len(merge(TaskState(), units, embeddings=vectors, semantic_threshold=0.9999).constraints)
        == 2
    )


def test_newer_parameter_wins_and_history_keeps_old_values() -> None:
    state = merge(
        TaskState(),
        [
            ParameterUnit(name="batch_size", value="32", source_seqs=[2]),
            ParameterUnit(name="batch size", value="64", source_seqs=[7]),
        ],
    )
    # A later compression brings evidence older than the current value (seq 4 < 7).
    late = merge(state, [ParameterUnit(name="Batch-Size", value="16", source_seqs=[4])])
    [param] = late.parameters
    assert (param.value, param.source_seq) == ("64", 7)
    assert [(h.value, h.seq) for h in param.history] == [("32", 2), ("16", 4)]
    # A later restatement of an old value is newer evidence: it wins.
    [param] = merge(
        late, [ParameterUnit(name="batch_size", value="32", source_seqs=[9])]
    ).parameters
    assert (param.value, param.source_seq) == ("32", 9)


def test_parameter_previous_value_seeds_history() -> None:
    state = merge(
        TaskState(), [ParameterUnit(name="lr", value="1e-4", previous="3e-4", source_seqs=[3])]
    )
    assert [h.value for h in state.parameters[0].history] == ["3e-4"]


def test_goal_conflict_resolved_by_newer_explicit_goal() -> None:
    state = merge(
        TaskState(),
        [
            GoalUnit(text="Plan a trip to Kyoto.", source_seqs=[1]),
            GoalUnit(text="Also look at Osaka.", source_seqs=[3]),  # implicit: ignored
            GoalUnit(text="Plan a week in Hokkaido.", explicit=True, source_seqs=[9]),
        ],
    )
    assert state.goal is not None
    assert state.goal.text == "Plan a week in Hokkaido."
    assert [h.value for h in state.goal.history] == ["Plan a trip to Kyoto."]


def test_pending_is_append_only_and_only_resolution_resolves() -> None:
    asked = merge(TaskState(), [PendingUnit(text="Shall I book TP204?", source_seqs=[4])])
    # A later snapshot that does not mention it does not erase it.
    later = merge(asked, [ConstraintUnit(text="Never fly Ryanair.", source_seqs=[8])])
    assert [p.text for p in later.open_pending()] == ["Shall I book TP204?"]
    resolved = merge(later, [ResolutionUnit(answer="yes", source_seqs=[9])])
    assert resolved.open_pending() == []
    assert (resolved.pending[0].resolution, resolved.pending[0].resolved_seq) == ("yes", 9)
    # Asked again after the answer: open again.
    reasked = merge(resolved, [PendingUnit(text="Shall I book TP204?", source_seqs=[12])])
    assert len(reasked.open_pending()) == 1


def test_resolution_does_not_resolve_a_question_asked_after_it() -> None:
    state = merge(
        TaskState(),
        [
            ResolutionUnit(answer="yes", source_seqs=[3]),
            PendingUnit(text="Shall I pay now?", source_seqs=[5]),
        ],
    )
    assert len(state.open_pending()) == 1


def test_revocation_keeps_the_constraint_marked_and_restatement_reactivates() -> None:
    rule = ConstraintUnit(text="Never book red-eye flights.", source_seqs=[1])
    revoked = merge(
        TaskState(),
        [
            rule,
            RevocationUnit(text="red-eye is fine now", target="red-eye flights", source_seqs=[5]),
        ],
    )
    [c] = revoked.constraints
    assert (c.status, c.revoked_seq) == ("revoked", 5)
    restated = merge(revoked, [ConstraintUnit(text="Never book red-eye flights!", source_seqs=[9])])
    assert restated.constraints[0].status == "active"


def test_revocation_without_target_revokes_the_latest_item() -> None:
    state = merge(
        TaskState(),
        [
            ConstraintUnit(text="Only aisle seats.", source_seqs=[1]),
            TodoUnit(text="Book the airport transfer.", source_seqs=[2]),
            RevocationUnit(text="scratch that", source_seqs=[3]),
        ],
    )
    assert state.constraints[0].status == "active"
    assert state.todos[0].status == "cancelled"


def test_todo_done_by_key_or_text() -> None:
    state = merge(
        TaskState(),
        [
            TodoUnit(
                text="book the hotel in Kyoto", missing_prerequisites=["dates"], source_seqs=[1]
            ),
            TodoUnit(text="hotel in Kyoto", status="done", source_seqs=[6]),
        ],
    )
    [todo] = state.todos
    assert (todo.status, todo.closed_seq, todo.missing_prerequisites) == ("done", 6, ["dates"])


def test_high_stakes_are_pinned_and_exempt_from_decay() -> None:
    state = merge(
        TaskState(),
        [
            HighStakesUnit(text="Allergic to peanuts.", category="allergy", source_seqs=[0]),
            FactUnit(text="Hotel is ¥12,000 per night.", source_seqs=[0]),
        ],
        through_seq=100,
    )
    assert state.high_stakes[0].activity == 1.0 and state.high_stakes[0].emphasized
    assert state.facts[0].activity == pytest.approx(0.95**100, abs=1e-6)


@pytest.mark.parametrize(
    ("factor", "distance", "expected"),
    [(0.95, 0, 1.0), (0.95, 1, 0.95), (0.9, 10, 0.9**10), (0.5, 3, 0.125)],
)
def test_activity_decays_with_turns_since_last_mention(
    factor: float, distance: int, expected: float
) -> None:
    state = merge(
        TaskState(),
        [
            FactUnit(text="Flight costs $420.", source_seqs=[10]),
            FactUnit(text="Emphasized fact costs $9.", source_seqs=[10], emphasized=True),
        ],
        decay_factor=factor,
        through_seq=10 + distance,
    )
    assert state.facts[0].activity == pytest.approx(expected, abs=1e-6)
    assert state.facts[1].activity == 1.0
    assert state.last_seq == 10 + distance


def test_actions_merge_attempts_and_keep_done_status() -> None:
    done = ActionUnit(
        tool="pay",
        arguments={"amount": 5},
        status="done",
        result_summary="ok",
        call_id="a",
        source_seqs=[1, 2],
    )
    failed_retry = ActionUnit(
        tool="pay",
        arguments={"amount": 5},
        status="failed",
        result_summary="error: duplicate",
        call_id="b",
        source_seqs=[5, 6],
    )
    state = merge(TaskState(), [done, failed_retry])
    [action] = state.actions
    assert (action.status, action.repeats, action.result_summary) == ("done", 1, "ok")


def test_artifacts_dedup_and_summary_appends_once() -> None:
    art = ArtifactUnit(artifact_kind="booking_ref", value="QX7T2L", label="pnr", source_seqs=[3])
    summary = SummaryUnit(text="User travels with a toddler.", source_seqs=[3])
    state = merge(TaskState(), [art, art, summary])
    state = merge(state, [summary])
    assert len(state.artifacts) == 1
    assert state.summary == "User travels with a toddler."


def test_language_from_argument_state_or_units() -> None:
    zh = merge(TaskState(), [ConstraintUnit(text="千万不要订红眼航班", source_seqs=[0])])
    assert zh.language == "zh"
    assert merge(zh, [ConstraintUnit(text="Never fly at night", source_seqs=[1])]).language == "zh"
    assert merge(TaskState(), [], language="en").language == "en"


# --------------------------------------------------------------------------- diff


def test_diff_summary_english() -> None:
    old = merge(TaskState(), [ParameterUnit(name="batch_size", value="32", source_seqs=[1])])
    new = merge(
        old,
        [
            ConstraintUnit(text="Never use the test set.", source_seqs=[2]),
            ConstraintUnit(text="Keep runs under 2 hours.", source_seqs=[3]),
            ActionUnit(tool="train", status="done", call_id="t1", source_seqs=[4, 5]),
            ActionUnit(tool="eval", status="done", call_id="e1", source_seqs=[6, 7]),
            ActionUnit(tool="upload", status="done", call_id="u1", source_seqs=[8, 9]),
            ParameterUnit(name="batch_size", value="64", source_seqs=[10]),
            PendingUnit(text="Shall I deploy?", source_seqs=[11]),
        ],
    )
    assert diff_summary(old, new, "en") == (
        "Added 2 constraints, 3 completed actions, 1 confirmation request; "
        "batch_size changed 32 → 64. 1 confirmation pending."
    )


def test_diff_summary_chinese_and_no_change() -> None:
    old = TaskState()
    new = merge(
        old,
        [
            ConstraintUnit(text="不要用测试集", source_seqs=[1]),
            ParameterUnit(name="学习率", value="3e-4", source_seqs=[2]),
        ],
    )
    assert diff_summary(old, new, "zh") == "新增 1 条约束；学习率 设为 3e-4。无待确认事项。"
    assert diff_summary(new, new, "en") == "No changes. Nothing pending."

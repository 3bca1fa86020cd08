"""The shared state of a task, pure: contributions merge in commit order (newest wins
with history, pending append-only), attributed to their agent and session."""

from __future__ import annotations

from app.compression.merge import merge
from app.compression.shared import (
    Contributor,
    SharedState,
    attribution,
    contribute,
    private_view,
    shared_units,
)
from app.compression.state import (
    ActionUnit,
    ConstraintUnit,
    GoalUnit,
    PendingUnit,
    PreferenceUnit,
    ResolutionUnit,
    TaskState,
)
from app.core.permissions import SECTIONS, Membership, sees_session, sees_task, writable

A = Contributor(agent="planner", session="s-a")
B = Contributor(agent="booker", session="s-b")


def test_a_later_contribution_is_newer_whatever_its_session_seqs() -> None:
    shared = contribute(
        SharedState(),
        [GoalUnit(text="Ship the spring catalogue", source_seqs=[40], explicit=True)],
        A,
    )
    # B's session is young (seq 3) but its contribution commits later: it is the newest.
    shared = contribute(
        shared, [GoalUnit(text="Ship the summer catalogue", source_seqs=[3], explicit=True)], B
    )
    goal = shared.state.goal
    assert goal is not None and goal.text == "Ship the summer catalogue"
    assert [h.value for h in goal.history] == ["Ship the spring catalogue"]
    [item] = [a for a in attribution(shared) if a.section == "goal"]
    assert [(c.agent, c.session, c.seq) for c in item.contributors] == [("booker", "s-b", 3)]


def test_an_answer_closes_only_the_question_its_own_session_asked() -> None:
    asked_a = [PendingUnit(text="Confirm the 14:00 slot with the client?", source_seqs=[2])]
    asked_b = [PendingUnit(text="Approve the 90 euro upgrade?", source_seqs=[5])]
    shared = contribute(SharedState(), asked_a, A)
    # A's session answers its own question after B asked another one.
    answer = ResolutionUnit(answer="yes", source_seqs=[3])
    private_a = merge(TaskState(), [*asked_a, answer])
    shared = contribute(shared, asked_b, B)
    units = shared_units([answer], SECTIONS, private_a)
    shared = contribute(shared, units, A)
    status = {p.text: p.status for p in shared.state.pending}
    assert status == {
        "Confirm the 14:00 slot with the client?": "resolved",
        "Approve the 90 euro upgrade?": "pending",
    }


def test_only_shared_sections_and_write_actions_are_contributed() -> None:
    units = [
        ConstraintUnit(text="Budget stays under 5000", source_seqs=[1]),
        PreferenceUnit(text="Likes window seats", source_seqs=[1]),
        ActionUnit(tool="search_trains", status="done", source_seqs=[2]),
        ActionUnit(
            tool="book_train", arguments={"train": "IC 512"}, status="done", source_seqs=[3]
        ),
    ]
    kinds = [u.kind for u in shared_units(units, SECTIONS, merge(TaskState(), units))]
    assert kinds == ["constraint", "action"]
    only_ledger = shared_units(units, ("actions",), merge(TaskState(), units))
    assert [getattr(u, "tool", None) for u in only_ledger] == ["book_train"]
    own = merge(TaskState(), units)
    view = private_view(own, ("constraints", "actions"))
    assert view.constraints == [] and [a.tool for a in view.actions] == ["search_trains"]
    assert [p.text for p in view.preferences] == ["Likes window seats"]


def test_roles() -> None:
    assert writable(Membership("r", "reader")) == ()
    assert writable(None) == ()
    assert writable(Membership("c", "contributor")) == SECTIONS
    assert writable(Membership("c", "contributor", ("actions",))) == ("actions",)
    assert sees_session(None, "anyone") and sees_session("a", "a")
    assert not sees_session("a", "b") and not sees_session("a", None)
    assert sees_task(None, []) and sees_task("a", ["a", "b"]) and not sees_task("c", ["a"])

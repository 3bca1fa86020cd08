"""Budget-aware rendering: tiers that degrade by priority, and changed values
updated wherever the old value still stands."""

from __future__ import annotations

import pytest

from app.compression.merge import merge
from app.compression.render import LABELS, render, render_tiers
from app.compression.state import (
    ActionUnit,
    ConstraintUnit,
    GoalUnit,
    HighStakesUnit,
    ParameterUnit,
    PendingUnit,
    TaskState,
    TodoUnit,
    Unit,
)
from app.core.tokens import count_tokens


def _call(tool: str, args: dict[str, object], summary: str, seq: int, **kw: object) -> ActionUnit:
    return ActionUnit(
        tool=tool,
        arguments=args,
        status=kw.get("status", "done"),  # type: ignore[arg-type]
        result_summary=summary,
        result_type="object",
        ref_paths=list(kw.get("refs", [])),  # type: ignore[call-overload]
        call_id=f"c{seq}",
        source_seqs=[seq, seq + 1],
    )


def busy_state() -> TaskState:
    """A support session: a few writes among many long lookups."""
    units: list[Unit] = [
        GoalUnit(text="Move the conference trip to the following week.", source_seqs=[0]),
        ConstraintUnit(text="Never pay with the corporate card.", source_seqs=[1]),
        HighStakesUnit(text="Account holder id: acct_77410.", category="account", source_seqs=[2]),
        ParameterUnit(name="travellers", value="3", source_seqs=[3]),
        PendingUnit(
            text="Waiting for the manager to approve the fare difference.", source_seqs=[4]
        ),
    ]
    seq = 10
    for i in range(30):
        units.append(
            _call(
                "get_booking_details",
                {"booking": f"BK{i:03d}"},
                "route=LIS-HND, fare_class=economy flexible, passengers: 3 items, "
                "segments: 4 items, baggage: 2 items, +8 more fields",
                seq,
            )
        )
        seq += 2
    units.append(
        _call(
            "change_booking",
            {"booking_id": "BK007"},
            "booking_id=BK007, status=changed",
            seq,
            refs=["$.booking_id"],
        )
    )
    units.append(
        _call(
            "issue_refund",
            {"booking_id": "BK011"},
            "error: refund window closed",
            seq + 2,
            status="failed",
        )
    )
    units.append(
        _call(
            "book_trip",
            {"route": "LIS-HND"},
            "booking_id=BK999, status=confirmed",
            seq + 4,
            refs=["$.booking_id"],
        )
    )
    return merge(TaskState(), units, through_seq=seq + 6)


def test_tiers_shrink_but_keep_what_matters_in_every_tier() -> None:
    tiers = render_tiers(busy_state(), language="en", max_tokens=1500)
    sizes = [count_tokens(t) for t in tiers]
    assert (
        len(tiers) >= 2 and sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    )
    for text in tiers:
        lines = text.splitlines()
        assert "- Never pay with the corporate card." in lines
        assert "acct_77410" in text
        assert any(line.startswith("Done change_booking") and "BK007" in line for line in lines)
        assert any(line.startswith("Done book_trip") and "BK999" in line for line in lines)
        assert any(
            line.startswith("Failed issue_refund") and "refund window" in line for line in lines
        )
        assert "Pending: Waiting for the manager to approve the fare difference." in lines
        assert "- travellers: 3" in lines
        # Thirty lookups are one line with their count, never thirty lines.
        assert sum("get_booking_details" in line for line in lines) == 1
        assert "get_booking_details ×30" in text
    # The smallest tier gave up detail, not sections: no long summaries left.
    assert "+8 more fields" not in tiers[-1]


def test_a_tight_budget_shows_what_survives() -> None:
    survivors = [
        "- Never pay with the corporate card.",
        "- Account holder id: acct_77410.",
        "Looked up get_booking_details ×30",
        "Done change_booking(booking_id=BK007) → booking_id=BK007",
        "Failed issue_refund(booking_id=BK011) → error: refund window closed",
        "Done book_trip() → booking_id=BK999",
        "Pending: Waiting for the manager to approve the fare difference.",
    ]
    # Lookups go to a count and writes to their ids before the parameters go…
    lines = render(busy_state(), language="en", max_tokens=140).splitlines()
    assert all(line in lines for line in survivors) and "- travellers: 3" in lines
    # …and the goal goes before the rules, the ledger, the parameters and the open question.
    lines = render(busy_state(), language="en", max_tokens=100).splitlines()
    assert all(line in lines for line in survivors) and "- travellers: 3" in lines
    assert not any(line.startswith("Goal:") for line in lines)


@pytest.mark.parametrize(
    ("language", "goal", "old", "new"),
    [
        ("en", "Plan the launch party with a budget of $35,000.", "$35,000", "$42,000"),
        ("zh", "帮我筹备发布会，预算 35000 元。", "35000 元", "42000 元"),
    ],
)
def test_a_changed_value_is_updated_wherever_the_old_one_stands(
    language: str, goal: str, old: str, new: str
) -> None:
    units: list[Unit] = [
        GoalUnit(text=goal, source_seqs=[0]),
        ConstraintUnit(text=f"Keep the total under {old}.", source_seqs=[1]),
        ParameterUnit(name="budget", value=old, source_seqs=[2]),
        ParameterUnit(name="budget", value=new, source_seqs=[9]),
    ]
    lines = render(merge(TaskState(), units), language=language).splitlines()
    note = LABELS[language]["changed"].format(name="budget", value=new)
    assert [line for line in lines if old.replace(",", "")[:3] in line.replace(",", "")] == [
        lines[1] if lines[1].endswith(note) else "goal not annotated",
        f"- Keep the total under {old}.{note}",
        LABELS[language]["param"].format(name="budget", value=new)
        + LABELS[language]["was"].format(old=old),
    ]


def test_a_line_already_holding_the_new_value_is_left_alone() -> None:
    units: list[Unit] = [
        ConstraintUnit(text="The budget moved from 300 to 450 euros.", source_seqs=[1]),
        ParameterUnit(name="budget", value="300 euros", source_seqs=[2]),
        ParameterUnit(name="budget", value="450 euros", source_seqs=[3]),
    ]
    text = render(merge(TaskState(), units), language="en")
    assert "changed:" not in text


@pytest.mark.parametrize("language", ["en", "zh"])
def test_an_open_todo_and_what_it_waits_for_survive_the_tightest_budget(language: str) -> None:
    todo = TodoUnit(
        text="rotate the signing keys",
        missing_prerequisites=["the security sign-off"],
        source_seqs=[5],
    )
    done = TodoUnit(text="draft the release notes", status="done", source_seqs=[6])
    state = merge(busy_state(), [todo, done])
    lab = LABELS[language]
    line = "- rotate the signing keys" + lab["missing"].format(items="the security sign-off")
    for budget in (100, 60, 1):
        lines = render(state, language=language, max_tokens=budget).splitlines()
        assert line in lines, (budget, lines)
    assert all(
        line in t.splitlines() for t in render_tiers(state, language=language, max_tokens=900)
    )

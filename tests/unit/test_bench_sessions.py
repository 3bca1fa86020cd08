"""The recall benchmark's session generator: deterministic, and its ground truth is true."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.sessions import (
    MAX_TURNS,
    MIN_TURNS,
    PLANT_SPAN,
    RECALL_KINDS,
    SCENARIOS,
    Session,
    generate,
    plan_sessions,
)

CASES = [(i, turns, lang) for i, (turns, lang) in enumerate([(50, "en"), (120, "zh"), (300, "en")])]


def _session(index: int, turns: int, lang: str) -> Session:
    return generate(seed=11, index=index, turns=turns, language=lang)  # type: ignore[arg-type]


def _text(message: dict[str, Any]) -> str:
    return (message.get("content") or "") + json.dumps(message.get("tool_calls") or [])


@pytest.mark.parametrize(("index", "turns", "lang"), CASES)
def test_same_seed_same_session(index: int, turns: int, lang: str) -> None:
    a, b = _session(index, turns, lang), _session(index, turns, lang)
    assert a.messages == b.messages
    assert a.planted == b.planted and a.noise == b.noise
    other = generate(seed=12, index=index, turns=turns, language=lang)  # type: ignore[arg-type]
    assert other.messages != a.messages


@pytest.mark.parametrize(("index", "turns", "lang"), CASES)
def test_shape_is_a_valid_agent_session(index: int, turns: int, lang: str) -> None:
    s = _session(index, turns, lang)
    assert turns <= len(s.messages) <= turns + 40  # a beat is never cut; short ones overflow
    ids = [m["id"] for m in s.messages]
    assert len(set(ids)) == len(ids)
    open_calls: set[str] = set()
    for m in s.messages:
        assert m["role"] in ("system", "user", "assistant", "tool")
        for call in m.get("tool_calls") or ():
            json.loads(call["function"]["arguments"])
            open_calls.add(call["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, "a result follows its call"
    json.dumps(s.ground_truth(), ensure_ascii=False)


@pytest.mark.parametrize(("index", "turns", "lang"), CASES)
def test_every_kind_is_planted_where_it_says(index: int, turns: int, lang: str) -> None:
    s = _session(index, turns, lang)
    by_id = {m["id"]: m for m in s.messages}
    kinds = {p.kind for p in s.planted}
    assert set(RECALL_KINDS) | {"answered"} <= kinds
    for p in s.planted:
        source = " ".join(_text(by_id[mid]) for mid in p.turn_ids)
        assert ids_in_order(s, p.turn_ids), p
        assert p.planted_at == s.messages.index(by_id[p.turn_ids[0]])
        if p.kind.startswith("parameter"):
            assert p.value in source and p.old_values and p.value not in p.old_values
        elif p.kind.startswith("action"):
            tool, evidence = p.phrases
            assert tool in source and evidence in source
        elif p.kind in ("pending", "answered"):
            assert p.phrases[0].rstrip("?？") in source
        elif p.kind == "todo":
            assert p.phrases[0] in source and p.prerequisite in source
        else:
            assert all(phrase in source for phrase in p.phrases), p
    # Planted items sit in the first PLANT_SPAN of the session (plus one beat of slack
    # in short sessions, where the beats alone exceed the span).
    last = max(p.planted_at for p in s.planted)
    assert last <= max(turns * PLANT_SPAN, len(s.messages) - 3)


def ids_in_order(session: Session, ids: tuple[str, ...]) -> bool:
    positions = [next(i for i, m in enumerate(session.messages) if m["id"] == x) for x in ids]
    return positions == sorted(positions)


def test_parameters_change_one_to_three_times_in_order() -> None:
    s = _session(2, 300, "en")
    current = [p for p in s.planted if p.kind == "parameter_current"]
    assert len(current) == len(SCENARIOS[2].params)
    for p in current:
        assert 1 <= len(p.old_values) <= 3
        said = [
            i
            for i, m in enumerate(s.messages)
            if m["role"] == "user" and p.name in (m["content"] or "")
        ]
        # The last statement naming the parameter is the one that sets its current value.
        assert p.value in s.messages[said[-1]]["content"]


def test_noise_phrases_are_chit_chat_only() -> None:
    s = _session(1, 300, "en")
    by_id = {m["id"]: m for m in s.messages}
    assert s.noise
    planted_text = " ".join(p.text for p in s.planted)
    for n in s.noise:
        assert by_id[n.turn_id]["content"] == n.phrase
        assert n.phrase not in planted_text


def test_plan_spreads_lengths_and_alternates_languages() -> None:
    plan = plan_sessions(seed=7, count=8, min_turns=60, max_turns=300)
    assert [lang for _, _, lang in plan] == ["en", "zh"] * 4
    assert sorted(t for _, t, _ in plan)[0] == 60 and max(t for _, t, _ in plan) == 300
    assert plan == plan_sessions(seed=7, count=8, min_turns=60, max_turns=300)


def test_lengths_outside_the_range_are_refused() -> None:
    with pytest.raises(ValueError):
        generate(seed=1, index=0, turns=MIN_TURNS - 1, language="en")
    with pytest.raises(ValueError):
        generate(seed=1, index=0, turns=MAX_TURNS + 1, language="zh")

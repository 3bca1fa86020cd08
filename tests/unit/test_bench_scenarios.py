"""The scenario files' loader and value specs: a spec draws from the RNG exactly as the
Python expression it stands for, and a malformed file is refused when it loads."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from bench.scenarios import Scenario, common, scenarios
from bench.scenarios.values import evaluate, resolve


def _rng() -> random.Random:
    return random.Random("spec-test")


SPECS: list[tuple[Any, Any]] = [
    ({"$randint": [3, 9]}, lambda r, i: r.randint(3, 9)),
    ({"$round": [{"$uniform": [0.5, 2.5]}, 2]}, lambda r, i: round(r.uniform(0.5, 2.5), 2)),
    ({"$choice": ["north", "south", "west"]}, lambda r, i: r.choice(["north", "south", "west"])),
    ({"$sample": [["a", "b", "c", "d"], 2]}, lambda r, i: r.sample(["a", "b", "c", "d"], 2)),
    ({"$chance": 0.3}, lambda r, i: r.random() < 0.3),
    ({"$either": [0.4, "yes", "no"]}, lambda r, i: "yes" if r.random() < 0.4 else "no"),
    ({"$randbits": 20}, lambda r, i: r.getrandbits(20)),
    ({"$repeat": ["ab ", {"$randint": [1, 4]}]}, lambda r, i: "ab " * r.randint(1, 4)),
    (
        {"$list": [{"$randint": [1, 3]}, {"$format": ["n{:03d}", {"$randint": [0, 99]}]}]},
        lambda r, i: [f"n{r.randint(0, 99):03d}" for _ in range(r.randint(1, 3))],
    ),
    ({"$i": {"mul": -2, "add": 10, "mod": 4}}, lambda r, i: 10 - 2 * (i % 4)),
    (
        {"k": {"$randint": [0, 5]}, "n": [1, {"$chance": 0.5}], "x": 2.0, "s": "plain"},
        lambda r, i: {"k": r.randint(0, 5), "n": [1, r.random() < 0.5], "x": 2.0, "s": "plain"},
    ),
]


@pytest.mark.parametrize(("spec", "python"), SPECS)
def test_a_spec_draws_like_its_python_expression(spec: Any, python: Any) -> None:
    a, b = _rng(), _rng()
    for i in range(6):
        assert evaluate(spec, a, i) == python(b, i)
    assert a.random() == b.random(), "the two RNGs are in the same state afterwards"


def test_refs_are_replaced_and_unknown_operators_refused() -> None:
    fragments = {"tail": {"$format": ["#{}", {"$randint": [1, 2]}]}}
    assert resolve({"a": [{"$ref": "tail"}]}, fragments) == {"a": [fragments["tail"]]}
    with pytest.raises(ValueError, match=r"\$rand"):
        resolve({"a": {"$rand": [1, 2]}}, fragments)
    with pytest.raises(KeyError):
        resolve({"$ref": "missing"}, fragments)


def test_the_files_load_in_the_order_common_names() -> None:
    loaded = scenarios()
    assert [s.key for s in loaded] == list(common().scenarios)
    assert len(loaded) >= 2 and all(s.acts and s.lookups and s.qa for s in loaded)


def test_a_misspelt_field_is_refused() -> None:
    raw = scenarios()[0].model_dump()
    assert Scenario.model_validate(raw) == scenarios()[0]
    raw["lookup"] = raw.pop("lookups")
    with pytest.raises(ValidationError, match="lookup"):
        Scenario.model_validate(raw)


def test_only_a_lookup_may_be_recalled_by_its_looked_up_line() -> None:
    """A write shown as "Looked up" is not a recalled completed action."""
    from bench.recall.rendered import DONE, READ
    from bench.sessions import generate

    done = [
        p
        for i, lang in enumerate(("en", "zh") * 6)
        for p in generate(seed=3, index=i, turns=200, language=lang).planted
        if p.kind == "action_done"
    ]
    writes = [p for p in done if p.phrases[0].split("_", 1)[0] in ("book", "create", "issue")]
    lookups = [p for p in done if p.phrases[0].startswith(("lookup_", "load_"))]
    assert writes and lookups
    assert all(set(p.markers) == set(DONE) for p in writes)
    assert all(set(READ) <= set(p.markers) for p in lookups)


_EN_STATE = "- shipping: courier (was express)\n"
_ZH_STATE = "- 配送：到店自提 (原为 加急)\n"


@pytest.mark.parametrize(
    ("language", "state", "stale"),
    [
        # the notice's change clause marks the old value as former, in both languages
        (
            "en",
            _EN_STATE + "Since the last compression: shipping changed standard → courier.",
            False,
        ),
        ("zh", _ZH_STATE + "自上次压缩以来：配送 由 普通 改为 到店自提。无待确认事项。", False),
        # an old value outside a change clause is still shown as current
        ("en", _EN_STATE + "Since the last compression: goal: shipping by standard post.", True),
        ("zh", _ZH_STATE + "自上次压缩以来：目标：用普通配送寄出搅拌机。", True),
    ],
)
def test_a_change_clause_marks_the_old_value_as_former(
    language: str, state: str, stale: bool
) -> None:
    from app.compression.render import LABELS
    from bench.recall.judge import Context, judge
    from bench.sessions import Planted

    name, value, olds = (
        ("shipping", "courier", ("standard", "express"))
        if language == "en"
        else ("配送", "到店自提", ("普通", "加急"))
    )
    item = Planted(
        kind="parameter_superseded_marked",
        key="p",
        text="",
        turn_ids=(),
        planted_at=0,
        name=name,
        value=value,
        old_values=olds,
    )
    lab = LABELS[language]
    param, notice = state.split("\n")
    # the notice is the last line, after whatever section comes last (here the todos)
    text = "\n".join((lab["title"].format(n=9), lab["params"], param, lab["todos"], "- x", notice))
    verdict = judge(item, Context(state=text, messages=[], tokens=0), {})
    assert verdict["ok"] is not stale

"""Stateful fuzzing that follows the OpenAPI links, against a real `mnemo serve`.

Schemathesis's own stateful phase (``st run --phases=stateful``, 4.32) starts its walks
only from operations its dependency analysis deems likely to succeed with random input,
and it takes the client-chosen ``user_id`` in our paths for a foreign key that nothing
produces: ``post_turns`` and ``create_memory`` are never entry points, and none of the
links they lead through is followed ("API Links: 0 covered"). This walk follows the
links of the served document itself. A step either enters (a generated request to an
operation some link starts from, or a conversation long enough to compress) or takes
an answer had earlier, follows the link from it taken least so far, fills the target's
parameters as the link says (``$request.path.…``, ``$response.body#/…``) and generates
the rest. Requests come from schemathesis's strategies, each drawn with its own seed
from one seeded ``random.Random`` (the same walk every run); every answer is checked by
schemathesis (no 5xx, every status, header and body as documented). The test fails
on any finding, and if a link is never followed to a 2xx answer.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.e2e.conftest import create_key, start_server

pytestmark = pytest.mark.e2e

T = TypeVar("T")

SEED = 11  # the same walk every run: a failure is a regression, never luck
STEPS = 250  # calls
ENTRY_SHARE = 0.25  # of the steps that start from scratch


@dataclass(frozen=True)
class Link:
    name: str  # "post_turns 201 GetContext"
    source: str
    status: int
    target: str
    parameters: dict[str, str]


@dataclass(frozen=True)
class Answer:
    """A response some link starts from, with the request that produced it."""

    operation: str
    status: int
    path: dict[str, Any]
    body: Any


def links_of(spec: dict[str, Any]) -> list[Link]:
    found = []
    for methods in spec["paths"].values():
        for op in methods.values():
            for status, response in op.get("responses", {}).items():
                for name, link in response.get("links", {}).items():
                    found.append(
                        Link(
                            name=f"{op['operationId']} {status} {name}",
                            source=op["operationId"],
                            status=int(status),
                            target=link["operationId"],
                            parameters=link["parameters"],
                        )
                    )
    return found


def resolve(expression: str, answer: Answer) -> Any:
    """A runtime expression of the kinds our links use; None when it has no value."""
    if expression.startswith("$request.path."):
        return answer.path.get(expression.removeprefix("$request.path."))
    if expression.startswith("$response.body#/"):
        value = answer.body
        for part in expression.removeprefix("$response.body#/").split("/"):
            if not isinstance(value, dict):
                return None
            value = value.get(part)
        return value
    raise AssertionError(f"a link expression this walker does not know: {expression}")


class Walk:
    """What every run shares: the server, the operations, coverage and failures."""

    def __init__(self, url: str, headers: dict[str, str], spec: dict[str, Any]) -> None:
        self.url, self.headers = url, headers
        schema = schemathesis.openapi.from_dict(spec)
        self.operations = {
            op.definition.raw["operationId"]: op
            for op in (result.ok() for result in schema.get_all_operations())
        }
        self.links = links_of(spec)
        self.entries = sorted({link.source for link in self.links})
        self.taken: Counter[str] = Counter()  # links followed
        self.reached: Counter[str] = Counter()  # links followed to a 2xx
        self.last_status = 0
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.failures: dict[str, str] = {}

    def call(self, operation: str, case: schemathesis.Case) -> Answer | None:
        response = case.call(base_url=self.url, headers=self.headers, timeout=30)
        self.last_status = response.status_code
        self.statuses[(operation, response.status_code)] += 1
        try:
            # Mnemo checks more than the schema says (arguments must be JSON, a tool
            # message needs its call id): schema-valid input may be a 4xx.
            case.validate_response(response, excluded_checks=[positive_data_acceptance])
        except (Exception, BaseExceptionGroup) as exc:  # each operation's first, unshrunk
            self.failures.setdefault(operation, f"{case.method} {case.formatted_path}: {exc}")
        starts = any(
            link.source == operation and link.status == response.status_code for link in self.links
        )
        if not starts:
            return None
        try:
            body = response.json()
        except ValueError:
            body = None
        return Answer(operation, response.status_code, dict(case.path_parameters or {}), body)


def draw(strategy: st.SearchStrategy[T], seed_value: int) -> T:
    """One value of ``strategy``, the same for the same seed (not the minimal one)."""
    box: list[T] = []

    @seed(seed_value)
    @settings(
        max_examples=2,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def grab(value: T) -> None:
        box.append(value)

    grab()
    return box[-1]


CONVERSATION = st.lists(
    st.text(st.characters(categories=["L", "N", "Zs"]), min_size=1, max_size=60).filter(str.strip),
    min_size=6,
    max_size=10,
)


def walk_links(walk: Walk, rng: random.Random, steps: int) -> None:
    """``steps`` calls: an entry (a generated request to an operation some link starts
    from, or a conversation long enough to compress) or a step along a link from an
    answer already had, the link taken least so far."""
    answers: list[Answer] = []
    for _ in range(steps):
        if not answers or rng.random() < ENTRY_SHARE:
            answer = enter(walk, rng)
        else:
            answer = follow(walk, rng.choice(answers), rng)
        if answer is not None:
            answers.append(answer)


def enter(walk: Walk, rng: random.Random) -> Answer | None:
    post = walk.operations["post_turns"]
    if rng.random() < 0.3:
        texts = draw(CONVERSATION, rng.randrange(2**32))
        roles = ("user", "assistant")
        case = post.Case(
            path_parameters={"session_id": f"conv-{rng.randrange(10**9)}"},
            body={
                "user_id": f"u-{rng.randrange(10**9)}",
                "messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)],
            },
            media_type="application/json",
        )
        return walk.call("post_turns", case)
    name = rng.choice(walk.entries)
    return walk.call(name, draw(walk.operations[name].as_strategy(), rng.randrange(2**32)))


def follow(walk: Walk, answer: Answer, rng: random.Random) -> Answer | None:
    links = [
        link
        for link in walk.links
        if link.source == answer.operation and link.status == answer.status
    ]
    link = min(links, key=lambda candidate: (walk.taken[candidate.name], candidate.name))
    values = {name: resolve(expr, answer) for name, expr in link.parameters.items()}
    if any(v is None for v in values.values()):
        return None  # e.g. "nothing to compress" has no event id
    target = walk.operations[link.target].as_strategy(path_parameters=values)
    walk.taken[link.name] += 1
    followed = walk.call(link.target, draw(target, rng.randrange(2**32)))
    if walk.last_status < 300:
        walk.reached[link.name] += 1
    return followed


def test_stateful_fuzzing_follows_every_link(data_dir: Path) -> None:
    key = create_key(data_dir)
    server = start_server(data_dir, env={"MNEMO_EMBEDDER": "hash"})
    try:
        spec = httpx.get(f"{server.url}/openapi.json").json()
        walk = Walk(server.url, {"Authorization": f"Bearer {key}"}, spec)
        assert len(walk.links) >= 12 and "post_turns" in walk.entries
        walk_links(walk, random.Random(SEED), STEPS)
    finally:
        server.stop()
    print(
        json.dumps(
            {
                "links": len(walk.links),
                "covered": len(walk.taken),
                "covered_to_2xx": len(walk.reached),
                "calls": sum(walk.statuses.values()),
                "statuses": sorted(
                    f"{op} {status}: {n}" for (op, status), n in walk.statuses.items()
                ),
            },
            indent=1,
        )
    )
    assert walk.failures == {}, "\n\n".join(walk.failures.values())
    never = sorted(link.name for link in walk.links if not walk.reached[link.name])
    assert never == [], f"links never followed to a 2xx: {never}"

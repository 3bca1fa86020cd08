"""Schemathesis against the served OpenAPI document: no 5xx, every response as documented.

Two runs of one harness. In the suite: derandomized (the same requests every run, so a
failure is a regression, never luck) and bounded. For exploration, new random requests
on each run, as many as asked: ``pytest --explore tests/e2e/test_fuzz.py`` (with
``--explore-examples N``); whatever it finds becomes a regression test
(tests/integration/test_hostile_input.py, tests/e2e/test_fuzz_regressions.py).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.e2e.conftest import Server, create_key, start_server

pytestmark = pytest.mark.e2e

EXAMPLES_PER_OPERATION = 25


def fuzz(data_dir: Path, *, examples: int, derandomize: bool) -> list[str]:
    """Every operation's first failure (empty if none) against a fresh server."""
    key = create_key(data_dir)
    auth = {"Authorization": f"Bearer {key}"}
    server = start_server(data_dir, env={"MNEMO_EMBEDDER": "hash"})
    try:
        return _fuzz_server(server, auth, examples=examples, derandomize=derandomize)
    finally:
        server.stop()


def _fuzz_server(
    server: Server, auth: dict[str, str], *, examples: int, derandomize: bool
) -> list[str]:
    # Something to find: generated ids rarely exist, these do.
    r = httpx.post(
        f"{server.url}/v1/sessions/s-1/turns",
        headers=auth,
        json={"user_id": "u-42", "messages": [{"role": "user", "content": "Never book red-eyes."}]},
    )
    assert r.status_code == 201, r.text
    spec = httpx.get(f"{server.url}/openapi.json").json()
    schema = schemathesis.openapi.from_dict(spec)
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12

    for operation in operations:

        @settings(
            max_examples=examples,
            derandomize=derandomize,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: schemathesis.Case) -> None:
            # Mnemo checks more than the schema can say (a tool message needs its
            # call id): schema-valid input may be a 4xx.
            case.call_and_validate(
                base_url=server.url,
                headers=auth,
                timeout=10,
                excluded_checks=[positive_data_acceptance],
            )

        try:
            run()
        except Exception as exc:  # collect every operation's first failure
            failures.append(f"{operation.label}: {exc}")
    return failures


def test_every_operation_survives_generated_requests(data_dir: Path) -> None:
    failures = fuzz(data_dir, examples=EXAMPLES_PER_OPERATION, derandomize=True)
    assert failures == [], "\n\n".join(failures)


@pytest.mark.explore
def test_explore_with_new_random_requests(data_dir: Path, request: pytest.FixtureRequest) -> None:
    examples = int(request.config.getoption("--explore-examples"))
    failures = fuzz(data_dir, examples=examples, derandomize=False)
    assert failures == [], "\n\n".join(failures)

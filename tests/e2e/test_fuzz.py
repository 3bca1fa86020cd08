"""Schemathesis against the served OpenAPI document: no 5xx, every response as documented."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.e2e.conftest import create_key, start_server

pytestmark = pytest.mark.e2e

EXAMPLES_PER_OPERATION = 25


def test_every_operation_survives_generated_requests(data_dir: Path) -> None:
    key = create_key(data_dir)
    auth = {"Authorization": f"Bearer {key}"}
    server = start_server(data_dir, env={"MNEMO_EMBEDDER": "hash"})
    try:
        # Something to find: generated ids rarely exist, these do.
        httpx.post(
            f"{server.url}/v1/sessions/s-1/turns",
            headers=auth,
            json={
                "user_id": "u-42",
                "messages": [{"role": "user", "content": "Never book red-eyes."}],
            },
        )
        spec = httpx.get(f"{server.url}/openapi.json").json()
        schema = schemathesis.openapi.from_dict(spec)
        failures: list[str] = []
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12

        for operation in operations:

            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy())
            def run(case: schemathesis.Case) -> None:
                # Mnemo checks more than the schema can say (a tool message needs its
                # call id, arguments must be JSON): schema-valid input may be a 4xx.
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
        assert failures == [], "\n\n".join(failures)
    finally:
        server.stop()

"""The OpenAPI document as client generators and fuzzers read it, and the docs pages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "openapi.json"


@pytest.fixture
async def spec(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    document: dict[str, Any] = r.json()
    return document


def operations(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        op["operationId"]: op
        for path in spec["paths"].values()
        for op in path.values()
        if isinstance(op, dict) and "operationId" in op
    }


async def test_the_committed_document_is_the_served_one(spec: dict[str, Any]) -> None:
    committed = json.loads(COMMITTED.read_text())
    assert committed == spec, "docs/openapi.json is stale: python -m app.main > docs/openapi.json"


async def test_operation_ids_are_readable_and_unique(spec: dict[str, Any]) -> None:
    ids = [
        op["operationId"]
        for path in spec["paths"].values()
        for op in path.values()
        if isinstance(op, dict)
    ]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", i) for i in ids), ids
    assert {"post_turns", "get_context", "create_memory", "list_turns"} <= set(ids)


async def test_every_body_documents_400_and_413_and_422_as_problems(
    spec: dict[str, Any],
) -> None:
    for op_id, op in operations(spec).items():
        if "requestBody" not in op:
            continue
        for status in ("400", "413", "422"):
            content = op["responses"][status]["content"]
            assert "application/problem+json" in content, (op_id, status)
        example = op["requestBody"]["content"]["application/json"].get("example")
        assert example is not None, op_id


async def test_a_body_that_cannot_be_parsed_is_the_documented_400(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post(
        "/v1/sessions/s-1/turns",
        content=b'{"user_id": "u-1", "messages": [{"role": "user", "content": "\xc3"}]}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["status"] == 400
    r = await client.post(
        "/v1/sessions/s-1/turns", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["errors"][0]["type"] == "json_invalid"


async def test_the_examples_are_accepted_as_documented(
    client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    ops = operations(spec)
    turns = ops["post_turns"]["requestBody"]["content"]["application/json"]["example"]
    r = await client.post("/v1/sessions/s-1/turns", json=turns)
    assert r.status_code == 201, r.text
    shown = ops["post_turns"]["responses"]["201"]["content"]["application/json"]["example"]
    assert set(shown) == set(r.json())
    memory = ops["create_memory"]["requestBody"]["content"]["application/json"]["example"]
    r = await client.post(f"/v1/users/{turns['user_id']}/memories", json=memory)
    assert r.status_code == 201, r.text
    shown = ops["create_memory"]["responses"]["201"]["content"]["application/json"]["example"]
    assert set(shown) == set(r.json())
    r = await client.get("/v1/sessions/s-1/context")
    shown = ops["get_context"]["responses"]["200"]["content"]["application/json"]["example"]
    assert set(shown) == set(r.json())


async def test_links_name_real_operations_and_their_parameters(spec: dict[str, Any]) -> None:
    ops = operations(spec)
    seen = 0
    for op in ops.values():
        for response in op["responses"].values():
            for link in response.get("links", {}).values():
                target = ops[link["operationId"]]
                names = {p["name"] for p in target.get("parameters", [])}
                assert set(link["parameters"]) <= names, link
                seen += 1
    assert seen >= 10
    assert "get_context" in {
        link["operationId"] for link in ops["post_turns"]["responses"]["201"]["links"].values()
    }


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_pages_load_only_packaged_assets(client: httpx.AsyncClient, page: str) -> None:
    r = await client.get(page)
    assert r.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert sources and all(s.startswith("/") for s in sources), sources
    for source in sources:
        asset = await client.get(source)
        assert asset.status_code == 200 and len(asset.content) > 1000, source


async def test_an_unsupported_method_says_which_are_allowed(client: httpx.AsyncClient) -> None:
    r = await client.request("TRACE", "/v1/sessions/s-1/context")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET"
    # Two routes share this path: the answer lists the methods of both.
    r = await client.request("OPTIONS", "/v1/sessions/s-1/turns")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    assert r.headers["content-type"].startswith("application/problem+json")

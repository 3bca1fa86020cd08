"""The OpenAPI document as client generators and fuzzers read it, and the docs pages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

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


def strings_that_may_hold_nul(spec: dict[str, Any]) -> set[str]:
    """Where a request (body or parameter) may carry a string with U+0000, as the
    document says: a string schema, or an object's keys, with no rule refusing it."""
    found: set[str] = set()
    seen: set[str] = set()

    def refuses_nul(schema: dict[str, Any]) -> bool:
        if "enum" in schema or "const" in schema or "format" in schema:
            return True
        return "pattern" in schema and re.search(schema["pattern"], "a\x00b") is None

    def walk(schema: Any, at: str) -> None:
        if isinstance(schema, list):
            for i, item in enumerate(schema):
                walk(item, f"{at}[{i}]")
            return
        if not isinstance(schema, dict):
            return
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                walk(spec["components"]["schemas"][name], name)
            return
        if schema.get("type") == "string" and not refuses_nul(schema):
            found.add(at)
        keys = schema.get("additionalProperties", False) is not False
        if keys and not refuses_nul(schema.get("propertyNames", {})):
            found.add(f"{at}{{keys}}")
        for key in ("properties", "patternProperties"):
            for name, sub in schema.get(key, {}).items():
                walk(sub, f"{at}.{name}")
        # Not allOf: a message's cross-field rules live there, narrowing its properties.
        for key in ("items", "additionalProperties", "anyOf", "oneOf"):
            if key in schema:
                walk(schema[key], at)

    for op_id, op in operations(spec).items():
        for parameter in op.get("parameters", ()):
            walk(parameter["schema"], f"{op_id}:{parameter['in']}.{parameter['name']}")
        for media in op.get("requestBody", {}).get("content", {}).values():
            walk(media["schema"], f"{op_id}:body")
    return found


async def test_the_document_states_that_stored_text_holds_no_nul(spec: dict[str, Any]) -> None:
    """A schema-valid request is accepted: Postgres cannot store U+0000, so every string
    that is stored says so with a pattern. Inline media data is not stored (it becomes
    a placeholder), nor is `audio` but for its transcript (checked where it stands in
    for content, in the message's `allOf`)."""
    assert strings_that_may_hold_nul(spec) == {
        "InputAudio.data",
        "FileRef.file_data[0]",
        "InputFilePart.file_data[0]",
        "MessageIn.audio[0]{keys}",
    }


async def test_booleans_are_strict(client: httpx.AsyncClient) -> None:
    """`0` or `"true"` is not a boolean: refused (422 naming the field), not coerced."""
    for value in (0, 1, "true"):
        r = await client.post("/v1/users/u-1/memories", json={"text": "x", "pinned": value})
        assert r.status_code == 422, (value, r.text)
        assert [e["field"] for e in r.json()["errors"]] == ["body.pinned"]
        message = {"role": "user", "content": "x", "emphasized": value}
        r = await client.post(
            "/v1/sessions/s-1/turns", json={"user_id": "u-1", "messages": [message]}
        )
        assert r.status_code == 422, (value, r.text)
        assert [e["field"] for e in r.json()["errors"]] == ["body.messages.0.emphasized"]
    r = await client.post("/v1/users/u-1/memories", json={"text": "x", "pinned": True})
    assert r.status_code == 201 and r.json()["pinned"] is True


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
MESSAGES = [  # (message, what the document and the server both say of it)
    ({"role": "user", "content": "x"}, True),
    ({"role": "developer", "content": "x"}, True),
    ({"role": "assistant", "content": None, "tool_calls": [CALL]}, True),
    (
        {
            "role": "assistant",
            "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{"}}],
        },
        True,
    ),
    ({"role": "assistant", "refusal": "I can't help with that."}, True),
    ({"role": "assistant", "content": None, "audio": {"id": "a", "transcript": "hi"}}, True),
    ({"role": "tool", "tool_call_id": "c1", "content": "ok"}, True),
    ({"role": "user", "content": "x", "metadata": {"a": [[["b", {"c": [1, None]}]]]}}, True),
    ({"role": "user", "content": "x", "created_at": "2026-01-05T10:00:00Z"}, True),
    ({"role": "user"}, False),
    ({"role": "user", "content": None, "refusal": None, "audio": None}, False),
    ({"role": "assistant", "content": None, "tool_calls": []}, False),
    ({"role": "assistant", "content": None, "audio": {"transcript": "a\x00b"}}, False),
    ({"role": "tool", "content": "x"}, False),
    ({"role": "user", "content": "x", "tool_call_id": "c1"}, False),
    ({"role": "user", "content": "x", "tool_calls": []}, False),
    ({"role": "user", "content": "a\x00b"}, False),
    ({"role": "user", "content": "x", "metadata": {"a": [{"b": ["\x00"]}]}}, False),
    ({"role": "user", "content": "x", "metadata": {"k\x00": 1}}, False),
    ({"role": "user", "content": "x", "emphasized": 0}, False),
    ({"role": "user", "content": "x", "created_at": 0}, False),
]


@pytest.mark.parametrize(("message", "valid"), MESSAGES)
async def test_the_message_schema_and_the_server_agree(
    client: httpx.AsyncClient, spec: dict[str, Any], message: dict[str, Any], valid: bool
) -> None:
    """What the document allows is stored (201); what it refuses is a 422 naming a field."""
    validator = Draft202012Validator(
        {"$ref": "#/components/schemas/MessageIn", "components": spec["components"]}
    )
    assert validator.is_valid(message) is valid
    r = await client.post("/v1/sessions/s-1/turns", json={"user_id": "u-1", "messages": [message]})
    assert r.status_code == (201 if valid else 422), r.text
    if not valid:
        assert all(e["field"].startswith("body.messages.0") for e in r.json()["errors"])

"""Bad input: problem+json naming the field at fault, and nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import make_settings, post_turns
from tests.integration.test_ingest import count_turns

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}

CASES = [
    ("unknown role", [{"role": "robot", "content": "x"}], 422, "body.messages.0.role"),
    (
        "tool without call id",
        [{"role": "tool", "content": "x"}],
        422,
        "body.messages.0.tool_call_id",
    ),
    (
        "null content from a user",
        [{"role": "user", "content": None}],
        422,
        "body.messages.0.content",
    ),
    (
        "tool calls on a user message",
        [{"role": "user", "content": "x", "tool_calls": [CALL]}],
        422,
        "body.messages.0.tool_calls",
    ),
    (
        "bad message id",
        [{"role": "user", "content": "x", "id": "has space"}],
        422,
        "body.messages.0.id",
    ),
    (
        "unknown field",
        [{"role": "user", "content": "x", "colour": "red"}],
        422,
        "body.messages.0.colour",
    ),
]


@pytest.mark.parametrize(("name", "messages", "status", "field"), CASES, ids=[c[0] for c in CASES])
async def test_bad_message_is_refused_whole(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    name: str,
    messages: list,
    status: int,
    field: str,
) -> None:
    good = {"role": "user", "content": "this one is fine", "id": "ok-1"}
    r = await post_turns(client, "s-bad", [good, *messages])
    # The good message is first, so the bad one sits at index 1.
    field = field.replace("messages.0", "messages.1")
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert {"type", "title", "status", "detail"} <= problem.keys()
    assert field in [e["field"] for e in problem["errors"]], problem
    assert await count_turns(engine) == 0


async def test_bad_ids_in_path_and_body(client: httpx.AsyncClient) -> None:
    r = await post_turns(client, "bad id!", [{"role": "user", "content": "x"}])
    assert r.status_code in (404, 422)
    r = await post_turns(client, "s", [{"role": "user", "content": "x"}], user="x" * 129)
    assert r.status_code == 422
    assert "body.user_id" in [e["field"] for e in r.json()["errors"]]
    r = await client.get("/v1/sessions/" + "y" * 129)
    assert r.status_code == 422


async def test_empty_and_malformed_bodies(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/sessions/s/turns", json={"user_id": "u", "messages": []})
    assert r.status_code == 422
    r = await client.post(
        "/v1/sessions/s/turns", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422


async def test_limits_are_413_and_say_the_limit(db_url: str, engine: AsyncEngine) -> None:
    from app.wiring import create_app

    settings = make_settings(
        db_url, max_messages_per_request=3, max_content_chars=100, max_body_bytes=2048
    )
    app = create_app(settings, database_url=db_url, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as c:
            many = [{"role": "user", "content": "x"}] * 4
            r = await post_turns(c, "s", many)
            assert r.status_code == 413 and "3" in r.json()["detail"]
            assert r.json()["errors"][0]["field"] == "body.messages"

            r = await post_turns(c, "s", [{"role": "user", "content": "y" * 101}])
            assert r.status_code == 413
            assert r.json()["errors"][0]["field"] == "body.messages.0.content"
            assert "100" in r.json()["errors"][0]["msg"]

            r = await post_turns(c, "s", [{"role": "user", "content": "z" * 90}] * 3 * 10)
            assert r.status_code == 413
            assert r.json()["errors"][0]["field"] == "body"
    assert await count_turns(engine) == 0


async def test_a_streamed_body_over_the_limit_is_413_without_a_content_length(
    db_url: str, engine: AsyncEngine
) -> None:
    """Chunked upload, no Content-Length to refuse up front: the limit is counted as the
    body arrives, and the request is refused before the app has stored anything."""
    from app.wiring import create_app

    app = create_app(make_settings(db_url, max_body_bytes=2048), database_url=db_url, engine=engine)
    sent = 0

    pieces = [b'{"user_id": "u", "messages": [']
    pieces += [b'{"role": "user", "content": "%d"},' % i for i in range(200)]
    pieces += [b'{"role": "user", "content": "end"}]}']

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for piece in pieces:
            sent += len(piece)
            yield piece

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as c:
            r = await c.post(
                "/v1/sessions/s/turns",
                content=chunks(),
                headers={"content-type": "application/json"},
            )
            assert "content-length" not in r.request.headers
            assert r.request.headers["transfer-encoding"] == "chunked"
            # Refused once past the limit, not after reading everything.
            assert 2048 < sent < sum(map(len, pieces))
            assert r.status_code == 413, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.json()["errors"][0]["field"] == "body"
            # Under the limit, the same streaming is accepted.
            small = [b'{"user_id": "u", ', b'"messages": [{"role": "user", "content": "ok"}]}']

            async def few() -> AsyncIterator[bytes]:
                for piece in small:
                    yield piece

            r = await c.post(
                "/v1/sessions/s2/turns", content=few(), headers={"content-type": "application/json"}
            )
            assert r.status_code == 201, r.text
    assert await count_turns(engine) == 1


async def test_context_budget_bounds(client: httpx.AsyncClient) -> None:
    await post_turns(client, "s", [{"role": "user", "content": "x"}])
    r = await client.get("/v1/sessions/s/context", params={"max_tokens": 10})
    assert r.status_code == 422
    assert "query.max_tokens" in [e["field"] for e in r.json()["errors"]]


async def test_text_postgres_cannot_store_is_refused(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    bad = [
        {"role": "user", "content": "nul \x00 inside"},
        {"role": "user", "content": "ok", "metadata": {"k\x00": 1}},
    ]
    for message in bad:
        r = await post_turns(client, "s", [message])
        assert r.status_code == 422, message
    # An unpaired surrogate, as a JSON escape (no Python client can encode it raw).
    raw = (
        '{"user_id": "u", "messages": '
        '[{"role": "user", "content": "ok", "metadata": {"v": ["\\ud800"]}}]}'
    )
    r = await client.post(
        "/v1/sessions/s/turns", content=raw.encode(), headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    r = await client.post("/v1/users/u/memories", json={"text": "a\x00b"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.text"
    await post_turns(client, "s", [{"role": "user", "content": "fine"}])
    r = await client.get("/v1/sessions/s/context", params={"query": "x\x00"})
    assert r.status_code == 422
    assert await count_turns(engine) == 1

"""POST /v1/sessions/{id}/turns against real Postgres."""

from __future__ import annotations

import asyncio

import httpx
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.turns import PreparedTurn
from app.services.ingest import Ingested, ingest_turns
from tests.conftest import post_turns

BOOKING = [
    {"role": "user", "content": "Never book red-eye flights.", "id": "m-1", "emphasized": True},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "book_flight", "arguments": '{"flight": "TP204"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"pnr": "QX7T2L", "status": "confirmed"}',
    },
]


async def count_turns(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM turns"))).scalar_one())


async def test_post_stores_turns_in_order_with_tokens(client: httpx.AsyncClient) -> None:
    r = await post_turns(client, "s-1", BOOKING, user="u-42")
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["session_id"] == "s-1" and body["user_id"] == "u-42"
    assert [t["seq"] for t in body["turns"]] == [1, 2, 3]
    assert body["turns"][0]["id"] == "m-1"
    assert all(t["tokens"] > 0 and t["duplicate"] is False for t in body["turns"])
    assert body["history_tokens"] == sum(t["tokens"] for t in body["turns"])
    assert body["compression_scheduled"] is False and body["trigger"] is None

    page = (await client.get("/v1/sessions/s-1/turns")).json()
    assert [t["role"] for t in page["turns"]] == ["user", "assistant", "tool"]
    assert page["turns"][0]["emphasized"] is True
    assert page["turns"][1]["tool_calls"][0]["function"]["name"] == "book_flight"
    assert page["turns"][2]["tool_call_id"] == "call_1"
    assert page["next_after_seq"] is None


async def test_reposting_a_client_id_is_a_noop(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    first = (await post_turns(client, "s-1", BOOKING[:1])).json()
    again = await post_turns(
        client, "s-1", [*BOOKING[:1], {"role": "user", "content": "hi", "id": "m-2"}]
    )
    assert again.status_code == 201
    turns = again.json()["turns"]
    assert turns[0] == {**first["turns"][0], "duplicate": True}
    assert turns[1]["seq"] == 2 and turns[1]["duplicate"] is False
    assert await count_turns(engine) == 2


async def test_same_id_twice_in_one_post_is_stored_once(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    msgs = [
        {"role": "user", "content": "a", "id": "x"},
        {"role": "user", "content": "a", "id": "x"},
    ]
    turns = (await post_turns(client, "s-1", msgs)).json()["turns"]
    assert [t["duplicate"] for t in turns] == [False, True]
    assert turns[0]["seq"] == turns[1]["seq"] == 1
    assert await count_turns(engine) == 1


async def test_a_client_id_is_unique_per_session_not_globally(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    msg = {"role": "user", "content": "first words here", "id": "m-1"}
    one = (await post_turns(client, "s-1", [msg])).json()["turns"]
    two = (await post_turns(client, "s-2", [{**msg, "content": "other words"}])).json()["turns"]
    assert [(t["seq"], t["duplicate"]) for t in one] == [(1, False)]
    assert [(t["seq"], t["duplicate"]) for t in two] == [(1, False)]
    assert await count_turns(engine) == 2
    archived = (await client.get("/v1/sessions/s-2/turns")).json()["turns"]
    assert [t["content"] for t in archived] == ["other words"]
    # Within a session the id still deduplicates.
    again = (await post_turns(client, "s-2", [msg])).json()["turns"]
    assert [(t["seq"], t["duplicate"]) for t in again] == [(1, True)]
    assert await count_turns(engine) == 2


async def test_session_of_another_user_is_409(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert (await post_turns(client, "s-1", BOOKING[:1], user="alice")).status_code == 201
    r = await post_turns(client, "s-1", [{"role": "user", "content": "mine now"}], user="bob")
    assert r.status_code == 409
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "another user" in r.json()["detail"]
    assert await count_turns(engine) == 1


async def test_concurrent_posts_get_gapless_seqs(client: httpx.AsyncClient) -> None:
    async def post(i: int) -> httpx.Response:
        msgs = [{"role": "user", "content": f"msg {i}-{k}", "id": f"c{i}-{k}"} for k in range(3)]
        return await post_turns(client, "busy", msgs)

    responses = await asyncio.gather(*(post(i) for i in range(20)))
    assert all(r.status_code == 201 for r in responses)
    seqs = sorted(t["seq"] for r in responses for t in r.json()["turns"])
    assert seqs == list(range(1, 61))
    # Each post's turns are contiguous, in the order sent.
    for r in responses:
        own = [t["seq"] for t in r.json()["turns"]]
        assert own == list(range(own[0], own[0] + 3))

    # Retrying every post with the same client ids stores nothing new.
    retried = await asyncio.gather(*(post(i) for i in range(20)))
    assert all(t["duplicate"] for r in retried for t in r.json()["turns"])
    session = (await client.get("/v1/sessions/busy")).json()
    assert session["turn_count"] == 60


async def test_turns_pagination(client: httpx.AsyncClient) -> None:
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(7)]
    await post_turns(client, "s-p", msgs)
    page1 = (await client.get("/v1/sessions/s-p/turns", params={"limit": 3})).json()
    assert [t["seq"] for t in page1["turns"]] == [1, 2, 3] and page1["next_after_seq"] == 3
    page3 = (await client.get("/v1/sessions/s-p/turns", params={"after_seq": 6, "limit": 3})).json()
    assert [t["seq"] for t in page3["turns"]] == [7] and page3["next_after_seq"] is None


async def test_session_summary_and_delete(client: httpx.AsyncClient, engine: AsyncEngine) -> None:
    await post_turns(client, "s-d", BOOKING, user="u-9")
    s = (await client.get("/v1/sessions/s-d")).json()
    assert s["user_id"] == "u-9" and s["turn_count"] == 3 and s["state_version"] == 0
    assert s["pending_jobs"] == 1 and s["last_compression_at"] is None  # episode indexing
    assert (await client.delete("/v1/sessions/s-d")).status_code == 204
    assert (await client.get("/v1/sessions/s-d")).status_code == 404
    assert (await client.delete("/v1/sessions/s-d")).status_code == 404
    assert await count_turns(engine) == 0


async def test_unknown_session_is_404_problem(client: httpx.AsyncClient) -> None:
    for path in ("", "/context", "/state", "/turns"):
        r = await client.get(f"/v1/sessions/nope{path}")
        assert r.status_code == 404, path
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["status"] == 404


# ------------------------------------------------------- round trips and the lock


async def _no_trigger(conn: object, counters: object, new: object) -> None:
    return None


def _turn(client_id: str, content: str = "Which gate does the flight leave from?") -> PreparedTurn:
    return PreparedTurn(
        client_id=client_id,
        role="user",
        content=content,
        tool_calls=None,
        tool_call_id=None,
        name=None,
        tokens=9,
        emphasized=False,
        metadata={},
        created_at=None,
    )


async def _ingest(conn: AsyncConnection, *turns: PreparedTurn) -> Ingested:
    return await ingest_turns(
        conn,
        tenant="default",
        session="s-lock",
        user="u-1",
        turns=turns,
        policy=_no_trigger,
        job_max_attempts=3,
    )


async def test_a_user_turn_is_stored_and_indexed_in_two_statements(engine: AsyncEngine) -> None:
    """Lock (with the known client ids) and append (with the index job): no more."""
    async with engine.begin() as conn:
        await _ingest(conn, _turn("m-1"))
    statements: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    try:
        async with engine.begin() as conn:
            out = await _ingest(conn, _turn("m-1"), _turn("m-2", "And the seat?"))
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", seen)
    assert [(t.id, t.seq, t.duplicate) for t in out.turns] == [("m-1", 1, True), ("m-2", 2, False)]
    assert len(statements) == 2, statements
    async with engine.connect() as conn:
        jobs = (await conn.execute(text("SELECT kind, status FROM jobs ORDER BY id"))).all()
    assert [tuple(j) for j in jobs] == [("index_session", "queued")]  # one waits, not two


async def test_a_retry_that_waited_for_the_lock_sees_the_turn_it_waited_for(
    engine: AsyncEngine,
) -> None:
    """The lock statement's snapshot predates the post it waited for: the turns that
    post stored are read again, so the retry is a duplicate, not a second insert."""
    async with engine.begin() as conn:
        await _ingest(conn, _turn("m-0"))
    async with engine.connect() as first:
        await first.begin()
        await _ingest(first, _turn("m-1"))  # holds the session row until it commits

        async def retry() -> Ingested:
            async with engine.begin() as conn:
                return await _ingest(conn, _turn("m-1"))

        waiting = asyncio.create_task(retry())
        async with engine.connect() as watch:
            # Autocommit: pg_stat_activity is read once per transaction.
            await watch.execution_options(isolation_level="AUTOCOMMIT")
            for _ in range(200):
                blocked = await watch.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE OF s%'"
                    )
                )
                if blocked:
                    break
                await asyncio.sleep(0.05)
        assert blocked, "the retry never waited for the lock"
        await first.commit()
    out = await waiting
    assert [(t.id, t.seq, t.duplicate) for t in out.turns] == [("m-1", 2, True)]
    assert await count_turns(engine) == 2

"""Long-term evidence in /context through HTTP: dated episodes and turns, the caller's
budget governing the memory block, BM25 ranking, question/answer pairs, and a
session's own compacted turns coming back (restore on miss). The worker runs
in-process with the deterministic test embedder."""

from __future__ import annotations

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.memories.bm25 import index_terms, search_terms
from app.stores import memories as repo
from app.stores import sessions
from app.stores.engine import driver_connection
from tests.integration.test_memories import drain


def _turns(prefix: str, lines: list[tuple[str, str]], when: str) -> list[dict]:
    """Messages alternating speakers, all at ``when`` (RFC 3339)."""
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": line,
            "name": speaker,
            "id": f"{prefix}-{i}",
            "created_at": when,
        }
        for i, (speaker, line) in enumerate(lines)
    ]


async def _post(client: httpx.AsyncClient, sid: str, user: str, messages: list[dict]) -> None:
    r = await client.post(f"/v1/sessions/{sid}/turns", json={"user_id": user, "messages": messages})
    assert r.status_code == 201, r.text


async def _probe(client: httpx.AsyncClient, user: str, sid: str = "probe") -> str:
    await _post(client, sid, user, [{"role": "system", "content": "probe", "id": "p"}])
    return sid


async def test_episodes_and_turns_are_dated_by_their_turns(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    lines = [
        ("Ana", "We moved the pottery class to the studio on Elm Street."),
        ("Ben", "Good, the old kiln there works."),
        ("Ana", "Yesterday I glazed three bowls."),
    ]
    await _post(client, "s1", "ana", _turns("a", lines, "2023-05-07T14:00:00Z"))
    await drain(engine, db_url)
    async with engine.connect() as conn:
        sources = (
            await conn.execute(text("SELECT source FROM memories WHERE kind = 'episode'"))
        ).scalars()
        froms = [s.get("from", "") for s in sources]
    # Every episode and every turn row knows when its turns happened.
    assert froms and all(f.startswith("2023-05-07T14:00:00") for f in froms)
    await _probe(client, "ana")
    ctx = (
        await client.get(
            "/v1/sessions/probe/context", params={"query": "when did Ana glaze bowls?"}
        )
    ).json()
    text_ = ctx["text"]
    assert "7 May 2023 (2023-05-07)" in text_
    # The relative date is resolved in the indexed text.
    assert "Yesterday (6 May 2023) I glazed three bowls." in text_


async def test_chinese_dates_are_written_the_chinese_way(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    lines = [("李雷", "我上周去杭州出差了，住在西湖边。"), ("韩梅", "西湖边的酒店贵吗？")]
    await _post(client, "z1", "li", _turns("z", lines, "2024-03-14T09:00:00Z"))
    await drain(engine, db_url)
    await _probe(client, "li")
    ctx = (await client.get("/v1/sessions/probe/context", params={"query": "杭州出差"})).json()
    assert "2024年3月14日 (2024-03-14)" in ctx["text"]
    assert "上周（2024年3月4日那周）" in ctx["text"]


async def test_the_callers_budget_governs_the_memory_block(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    # Forty dated sessions, each mentioning the garden: far more than any budget.
    for day in range(1, 41):
        lines = [
            (
                "Ana",
                f"Day {day}: in the garden I planted row {day} of tomatoes, basil, peppers"
                " and marigolds along the south fence, then mulched it with straw.",
            ),
            (
                "Ben",
                f"Row {day} sounds good; water the garden tomatoes tonight and check the"
                " peppers for aphids before the weekend.",
            ),
        ]
        await _post(client, f"g{day}", "gardener", _turns(f"g{day}", lines, "2023-06-01T10:00:00Z"))
    await drain(engine, db_url)
    await _probe(client, "gardener")

    async def context(**params: object) -> dict:
        r = await client.get("/v1/sessions/probe/context", params=params)
        assert r.status_code == 200, r.text
        return r.json()

    small = await context(query="garden tomatoes", max_tokens=500)
    large = await context(query="garden tomatoes", max_tokens=2500)
    assert small["tokens"] <= 500 and large["tokens"] <= 2500
    # An explicit query may use all that is left: far above a third of the budget.
    assert large["tokens"] > 2000 and small["tokens"] > 400
    assert len(large["memory_ids"]) > len(small["memory_ids"]) > 3
    capped = await context(query="garden tomatoes", max_tokens=2500, memory_tokens=300)
    assert 0 < capped["tokens"] <= 300 + 40
    none = await context(query="garden tomatoes", max_tokens=2500, memory_k=0)
    assert none["memory_ids"] == []
    bad = await client.get("/v1/sessions/probe/context", params={"query": "x", "memory_tokens": -1})
    assert bad.status_code == 422 and "memory_tokens" in bad.text


async def test_lexical_leg_is_bm25_with_stemming(engine: AsyncEngine) -> None:
    texts = {
        "long": " ".join(["we talked about the weather and the garden again"] * 8)
        + " and the zeppelin",
        "short": "The zeppelin museum opens in June.",
        "repeats": "Paintings, paintings, paintings and more paintings everywhere.",
        "once": "She painted a lighthouse.",
        "other": "Nothing relevant here at all.",
    }
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="bm")
        ids = {}
        for name, body in texts.items():
            ids[
                await repo.insert_memory(
                    conn,
                    tenant="default",
                    user_pk=user_pk,
                    kind="fact",
                    text_=body,
                    text_key=name,
                    pinned=False,
                    ttl_days=None,
                    source={},
                    metadata={},
                    terms=index_terms(body),
                )
            ] = name

        async def ranked(query: str) -> list[str]:
            rows = await repo.lexical_search(conn, user_pk=user_pk, terms=search_terms(query), k=5)
            return [ids[r.id] for r in rows]

        # Length normalisation: the short row holding the term beats the long one.
        assert (await ranked("zeppelin"))[:2] == ["short", "long"]
        # Stemming: "painting" meets "paintings" and "painted"; saturation: four
        # repeats are not worth four times one mention.
        hits = await ranked("painting")
        assert set(hits) == {"repeats", "once"}
        rows = await repo.lexical_search(conn, user_pk=user_pk, terms=search_terms("painting"), k=5)
        scores = {ids[r.id]: r.score or 0.0 for r in rows}
        assert scores["once"] < scores["repeats"] < 2 * scores["once"]


async def test_a_question_that_was_hit_brings_its_answer(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    lines = [
        ("Ana", "Which trail did you hike with the dog on Sunday?"),
        ("Ben", "The one along the ridge, about twelve kilometres."),
        *[("Ana" if i % 2 else "Ben", f"Unrelated chatter number {i}.") for i in range(20)],
    ]
    await _post(client, "q1", "hiker", _turns("q", lines, "2023-08-01T10:00:00Z"))
    await drain(engine, db_url)
    await _probe(client, "hiker")
    ctx = (
        await client.get(
            "/v1/sessions/probe/context",
            params={"query": "which trail did they hike with the dog", "memory_tokens": 120},
        )
    ).json()
    assert "Which trail did you hike" in ctx["text"]
    assert "The one along the ridge" in ctx["text"]


async def test_a_session_sees_its_own_compacted_turns_again_never_its_live_ones(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    lines = [("Ana", "My locker code at the gym is 4471.")]
    lines += [("Ana" if i % 2 else "Ben", f"Step {i}: we fix the parser bug.") for i in range(12)]
    await _post(client, "own", "owner", _turns("o", lines, "2023-09-01T10:00:00Z"))
    await drain(engine, db_url)
    query = {"query": "what is my gym locker code", "max_tokens": 2000}
    before = (await client.get("/v1/sessions/own/context", params=query)).json()
    # Live: the turn is in the context once, as a recent turn, not again as memory.
    assert before["text"].count("locker code at the gym is 4471") == 1
    r = await client.post("/v1/sessions/own/compact")
    assert r.json()["status"] in ("scheduled", "compressed")
    await drain(engine, db_url)  # the compression, then the indexing it leaves
    async with engine.connect() as conn:
        compacted = (
            await conn.execute(
                text(
                    "SELECT compacted FROM turns t JOIN sessions s ON s.id = t.session_id"
                    " WHERE s.external_id = 'own' AND t.seq = 1"
                )
            )
        ).scalar_one()
    assert compacted
    after = (await client.get("/v1/sessions/own/context", params=query)).json()
    # Compacted away, the turn comes back from the archive as long-term evidence.
    memory = after["text"].split("## Long-term memory", 1)[-1]
    assert "Ana: My locker code at the gym is 4471." in memory
    assert after["memory_ids"]


async def test_the_postings_of_a_querys_terms_are_read_from_their_index_alone(
    engine: AsyncEngine,
) -> None:
    """The lexical leg needs a posting's frequency, length and kind: carried in the key's
    index, a user's postings are an index-only scan, not one heap page per posting."""
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="ix")
        for i, body in enumerate(["The zeppelin museum opens in June.", "A zeppelin flew by."]):
            await repo.insert_memory(
                conn,
                tenant="default",
                user_pk=user_pk,
                kind="fact",
                text_=body,
                text_key=str(i),
                pinned=False,
                ttl_days=None,
                source={},
                metadata={},
                terms=index_terms(body),
            )
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await auto.execute(text("VACUUM ANALYZE memory_terms"))
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        async with db.transaction():
            await db.execute("SET LOCAL enable_seqscan = off")
            await db.execute("SET LOCAL enable_bitmapscan = off")
            terms = search_terms("zeppelin museum")
            explained = await db.fetch("EXPLAIN " + repo.LEXICAL, user_pk, terms, None, 5)
        plan = "\n".join(r[0] for r in explained)
    assert "Index Only Scan using memory_terms_pkey on memory_terms" in plan, plan

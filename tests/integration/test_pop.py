"""`DELETE /v1/sessions/{id}/turns/last` against real Postgres: what a pop removes (the
turn, its share of the counters, the index rows and the embedding derived from it), what
it refuses (a compacted turn: 409), and its races with posts, pops, compressions and
index runs: never a 5xx, nothing lost, nothing removed twice."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.audit import CompressionRecord
from app.compression.live_notes import RULES_STAMP
from app.services import compression as compression_service
from app.services import memory_jobs
from app.stores import compression as compression_store
from app.stores import sessions as sessions_store
from app.wiring import build_embedder_from_settings
from tests.conftest import make_settings, post_turns
from tests.integration.test_memories import drain

PROBLEMS = "https://mnemo.dev/problems/"


def said(i: int, role: str = "user") -> dict[str, Any]:
    topics = ["the ferry timetable", "a vegetarian dinner", "the museum pass", "train seats"]
    return {"role": role, "content": f"Note {i} about {topics[i % len(topics)]}.", "id": f"m-{i}"}


async def pop(client: httpx.AsyncClient, session: str) -> httpx.Response:
    return await client.delete(f"/v1/sessions/{session}/turns/last")


async def counters(engine: AsyncEngine, session: str) -> dict[str, Any]:
    """The session's counters beside the same figures recomputed from its turns."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("""
                SELECT s.turn_count, s.live_turns, s.history_tokens, s.total_tokens,
                       s.episode_seq, s.last_user_seq, s.promoted_seq,
                       coalesce(max(t.seq), 0) AS max_seq, count(t.id) AS n,
                       count(t.id) FILTER (WHERE NOT t.compacted) AS live,
                       coalesce(sum(t.tokens) FILTER (WHERE NOT t.compacted), 0) AS live_tokens,
                       coalesce(sum(t.tokens), 0) AS all_tokens
                FROM sessions s LEFT JOIN turns t ON t.session_id = s.id
                WHERE s.external_id = :s GROUP BY s.id
            """),
                {"s": session},
            )
        ).one()
    return dict(row._mapping)


def consistent(c: dict[str, Any]) -> None:
    assert c["turn_count"] == c["max_seq"] == c["n"]  # gapless: seqs are 1..turn_count
    assert c["live_turns"] == c["live"]
    assert c["history_tokens"] == c["live_tokens"]
    assert c["total_tokens"] == c["all_tokens"]
    assert c["episode_seq"] <= c["turn_count"]
    assert c["last_user_seq"] is None or c["last_user_seq"] <= c["turn_count"]


async def seqs_of(client: httpx.AsyncClient, session: str) -> dict[str, int]:
    page = (await client.get(f"/v1/sessions/{session}/turns", params={"limit": 1000})).json()
    return {t["id"]: t["seq"] for t in page["turns"]}


async def index_rows(engine: AsyncEngine, session: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("""
            SELECT m.text, m.turn_seq, m.source -> 'seqs' AS seqs, m.metadata FROM memories m
            JOIN sessions s ON s.id = m.session_id
            WHERE s.external_id = :s AND m.kind = 'episode'
        """),
            {"s": session},
        )
        return [dict(r._mapping) for r in rows]


async def test_pop_returns_the_newest_turn_and_gives_its_seq_and_id_back(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    posted = [said(1), said(2, "assistant"), said(3)]
    assert (await post_turns(client, "s", posted)).status_code == 201
    before = (await client.get("/v1/sessions/s")).json()

    r = await pop(client, "s")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["turn"]["id"] == "m-3" and body["turn"]["seq"] == 3
    assert body["turn"]["content"] == posted[2]["content"] and not body["turn"]["compacted"]
    assert body["turn_count"] == 2
    assert body["history_tokens"] == before["history_tokens"] - body["turn"]["tokens"]
    assert await seqs_of(client, "s") == {"m-1": 1, "m-2": 2}
    consistent(await counters(engine, "s"))

    # The popped id is free again: posting it stores it again, at the freed seq.
    again = (await post_turns(client, "s", [posted[2]])).json()["turns"][0]
    assert again == {"id": "m-3", "seq": 3, "tokens": body["turn"]["tokens"], "duplicate": False}
    consistent(await counters(engine, "s"))


async def test_pop_until_empty_then_404_and_unknown_session_404(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await post_turns(client, "s", [said(1), said(2, "assistant")])
    assert [(await pop(client, "s")).json()["turn"]["seq"] for _ in range(2)] == [2, 1]
    empty = await pop(client, "s")
    assert empty.status_code == 404
    assert empty.headers["content-type"].startswith("application/problem+json")
    assert empty.json()["type"] == PROBLEMS + "no-turns"
    assert (await client.get("/v1/sessions/s")).json()["turn_count"] == 0  # the session stays
    consistent(await counters(engine, "s"))
    unknown = await pop(client, "nobody")
    assert unknown.status_code == 404 and unknown.json()["type"] == PROBLEMS + "not-found"
    # An empty session takes posts again from seq 1.
    assert (await post_turns(client, "s", [said(9)])).json()["turns"][0]["seq"] == 1


async def test_a_compacted_turn_cannot_be_popped(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    await post_turns(client, "s", [said(i, ("user", "assistant")[i % 2]) for i in range(1, 11)])
    assert (await client.post("/v1/sessions/s/compact")).status_code == 202
    await drain(engine, db_url)
    turns = (await client.get("/v1/sessions/s/turns")).json()["turns"]
    live = [t for t in turns if not t["compacted"]]
    assert live and len(live) < len(turns)  # the working window stayed live
    for t in reversed(live):
        assert (await pop(client, "s")).json()["turn"]["id"] == t["id"]
    refused = await pop(client, "s")
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["type"] == PROBLEMS + "turn-compacted"
    assert "compacted" in problem["detail"] and "seq" in problem["detail"]
    assert len((await client.get("/v1/sessions/s/turns")).json()["turns"]) == len(turns) - len(live)
    consistent(await counters(engine, "s"))


async def test_pop_takes_the_index_rows_and_the_embedding_of_the_turn(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    await post_turns(client, "s", [said(1), said(2, "assistant"), said(3)])
    await drain(engine, db_url)
    c = await counters(engine, "s")
    assert c["last_user_seq"] == 3
    assert any(r["turn_seq"] == 3 for r in await index_rows(engine, "s"))

    await pop(client, "s")
    c = await counters(engine, "s")
    consistent(c)
    assert c["last_user_seq"] is None  # the embedding /context reuses was the popped turn's
    rows = await index_rows(engine, "s")
    assert all(max(r["seqs"]) < 3 for r in rows)
    assert not any("Note 3" in r["text"] for r in rows)

    # Another message at the freed seq is embedded and indexed as itself.
    replacement = {"role": "user", "content": "Where does the night bus stop?", "id": "m-3b"}
    await post_turns(client, "s", [replacement])
    await drain(engine, db_url)
    c = await counters(engine, "s")
    assert c["last_user_seq"] == 3
    rows = await index_rows(engine, "s")
    single = [r for r in rows if r["turn_seq"] == 3]
    assert len(single) == 1 and "night bus" in single[0]["text"]
    assert not any("Note 3" in r["text"] for r in rows)
    async with engine.connect() as conn:
        stored = (
            await conn.execute(
                text("SELECT last_user_embedding FROM sessions WHERE external_id = 's'")
            )
        ).scalar()
    async with httpx.AsyncClient() as http:
        embedder = build_embedder_from_settings(make_settings(db_url), http)
        expected = (await embedder.embed([replacement["content"]]))[0]
    assert list(stored) == pytest.approx(expected, abs=1e-6)


async def test_pops_below_the_closed_episodes_reindex_what_is_left_once(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str
) -> None:
    turns = [said(i, ("user", "assistant")[(i + 1) % 2]) for i in range(1, 25)]
    for start in range(0, 24, 4):  # several posts, so episodes close behind the newest
        await post_turns(client, "s", turns[start : start + 4])
    await drain(engine, db_url)
    closed = (await counters(engine, "s"))["episode_seq"]
    assert closed > 2, "indexing closed no episode; the test needs closed ones"
    for _ in range(24 - closed + 2):  # down past the closed mark
        assert (await pop(client, "s")).status_code == 200
    c = await counters(engine, "s")
    consistent(c)
    left = c["turn_count"]
    assert c["episode_seq"] < closed
    assert all(max(r["seqs"]) <= left for r in await index_rows(engine, "s"))

    await drain(engine, db_url)  # the run the pops queued
    rows = await index_rows(engine, "s")
    singles = sorted(r["turn_seq"] for r in rows if r["turn_seq"] is not None)
    assert singles == list(range(1, left + 1))  # each turn left indexed once, none popped
    covered = {s for r in rows if r["turn_seq"] is None for s in r["seqs"]}
    assert covered == set(range(1, left + 1))  # episodes (they overlap) cover what is left


async def test_concurrent_pops_remove_each_turn_once(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await post_turns(client, "s", [said(i) for i in range(1, 7)])
    answers = await asyncio.gather(*(pop(client, "s") for _ in range(9)))
    assert sorted(r.status_code for r in answers) == [200] * 6 + [404] * 3
    popped = [r.json()["turn"]["seq"] for r in answers if r.status_code == 200]
    assert sorted(popped) == [1, 2, 3, 4, 5, 6]
    consistent(await counters(engine, "s"))


async def test_pops_and_posts_at_once_lose_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await post_turns(client, "s", [said(i) for i in range(1, 6)])
    posts = [post_turns(client, "s", [said(i)]) for i in range(100, 108)]
    pops = [pop(client, "s") for _ in range(5)]
    answers = await asyncio.gather(*posts, *pops)
    assert all(r.status_code in (200, 201) for r in answers), [r.text for r in answers]
    popped = {r.json()["turn"]["id"] for r in answers if r.status_code == 200}
    assert len(popped) == 5
    expected = {f"m-{i}" for i in (*range(1, 6), *range(100, 108))} - popped
    stored = await seqs_of(client, "s")
    assert set(stored) == expected
    assert sorted(stored.values()) == list(range(1, len(expected) + 1))
    consistent(await counters(engine, "s"))


async def test_pop_waits_for_a_committing_compression_and_then_refuses_its_turn(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """A compression holding the session's lock while it commits: the pop waits for it;
    the compaction took the newest turn, so the pop answers 409 (not a 5xx)."""
    await post_turns(client, "s", [said(1), said(2, "assistant"), said(3)])
    async with engine.connect() as conn:
        sid = await sessions_store.session_pk(conn, tenant="default", session="s")
        snap = await compression_store.snapshot(conn, session_pk=sid, rules=RULES_STAMP)
    assert snap is not None
    async with engine.begin() as conn:
        await _apply_all(conn, snap)
        waiting = asyncio.ensure_future(pop(client, "s"))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # blocked on the session's row
    r = await waiting
    assert r.status_code == 409 and r.json()["type"] == PROBLEMS + "turn-compacted"
    consistent(await counters(engine, "s"))


async def test_a_compression_that_took_a_popped_turn_fails_its_commit(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await post_turns(client, "s", [said(1), said(2, "assistant"), said(3)])
    async with engine.connect() as conn:
        sid = await sessions_store.session_pk(conn, tenant="default", session="s")
        snap = await compression_store.snapshot(conn, session_pk=sid, rules=RULES_STAMP)
    assert snap is not None
    assert (await pop(client, "s")).status_code == 200
    with pytest.raises(compression_store.StaleSnapshot):
        async with engine.begin() as conn:
            await _apply_all(conn, snap)
    assert (await client.get("/v1/sessions/s/state")).json()["version"] == 0
    consistent(await counters(engine, "s"))


async def _apply_all(conn: Any, snap: compression_store.Snapshot) -> None:
    """Commit a compression of every live turn of ``snap`` (as the job's commit does)."""
    record = CompressionRecord(
        trigger="manual",
        tier=1,
        turn_ids=[ext for _, ext, _, _ in snap.live],
        turn_seqs=[v.seq for *_, v in snap.live],
        input_tokens=sum(tokens for _, _, tokens, _ in snap.live),
        output_tokens=1,
        ratio=1.0,
        duration_ms=1.0,
        extractor="rules",
        fallback_reason=None,
        units=[],
        rendered_state="",
        change_summary="",
        dropped_units=0,
        job_id=None,
    )
    await compression_store.apply_compression(
        conn,
        snap=snap,
        state=snap.state,
        rendered="",
        rendered_tokens=0,
        turn_pks=[pk for pk, *_ in snap.live],
        record=record,
    )


async def test_a_compression_job_racing_pops_runs_again_from_what_is_left(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's compression snapshots, then pops take turns it chose before it
    commits: its commit fails, it runs again, and the state never counts the popped."""
    await post_turns(
        client, "s", [said(i, ("user", "assistant")[(i + 1) % 2]) for i in range(1, 11)]
    )
    assert (await client.post("/v1/sessions/s/compact")).status_code == 202
    real = compression_service.repo.apply_compression
    raced: list[int] = []

    async def pops_first(conn: Any, **kw: Any) -> Any:
        if not raced:  # in another connection, before this commit takes the lock
            for _ in range(6):
                raced.append((await pop(client, "s")).status_code)
        return await real(conn, **kw)

    monkeypatch.setattr(compression_service.repo, "apply_compression", pops_first)
    await drain(engine, db_url)
    for _ in range(50):  # the failed attempt is retried after its backoff
        async with engine.connect() as conn:
            waiting = (
                await conn.execute(text("SELECT count(*) FROM jobs WHERE status = 'queued'"))
            ).scalar()
        if not waiting:
            break
        await asyncio.sleep(0.1)
        await drain(engine, db_url)
    assert raced == [200] * 6
    events = (await client.get("/v1/sessions/s/events")).json()["events"]
    assert len(events) == 1  # the retry committed, once
    event = (await client.get(f"/v1/sessions/s/events/{events[0]['id']}")).json()
    assert max(event["turn_seqs"]) <= 4
    consistent(await counters(engine, "s"))


async def test_an_index_run_that_read_a_popped_turn_does_not_commit_it(
    client: httpx.AsyncClient, engine: AsyncEngine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await post_turns(client, "s", [said(1), said(2, "assistant"), said(3)])
    real = memory_jobs.sessions.turns_after_marked
    raced: list[int] = []

    async def read_then_pop(conn: Any, **kw: Any) -> Any:
        read = await real(conn, **kw)
        if not raced:
            raced.append((await pop(client, "s")).status_code)
        return read

    monkeypatch.setattr(memory_jobs.sessions, "turns_after_marked", read_then_pop)
    await drain(engine, db_url)
    assert raced == [200]
    rows = await index_rows(engine, "s")
    assert not any("Note 3" in r["text"] for r in rows)  # the skipped run wrote nothing
    assert sorted(r["turn_seq"] for r in rows if r["turn_seq"]) == [1, 2]  # the pop's run did
    c = await counters(engine, "s")
    consistent(c)
    assert c["last_user_seq"] == 1

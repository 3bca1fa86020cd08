"""Memories promoted from real sessions reach later sessions of the same user only;
a restated preference never duplicates, a contradicted one never comes back.
Runs the real multilingual embedder (USE) and the real worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.wiring import create_app
from tests.conftest import make_settings


@pytest.fixture
async def live(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(db_url, embedded_worker=True, embedder="use")
    app = create_app(settings, database_url=db_url, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as c:
            yield c


async def settle(client: httpx.AsyncClient, engine: AsyncEngine, timeout_s: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        async with engine.connect() as conn:
            busy = (
                await conn.execute(
                    text("SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')")
                )
            ).scalar_one()
        if not busy:
            return
        assert loop.time() < deadline, "jobs did not finish"
        await asyncio.sleep(0.05)


async def session(
    client: httpx.AsyncClient, engine: AsyncEngine, sid: str, user: str, lines: list[str]
) -> None:
    messages = []
    for i, line in enumerate(lines):
        messages.append({"role": "user", "content": line, "id": f"{sid}-u{i}"})
        messages.append({"role": "assistant", "content": "Noted.", "id": f"{sid}-a{i}"})
    messages += [{"role": "user", "content": f"filler {i}", "id": f"{sid}-f{i}"} for i in range(4)]
    r = await client.post(f"/v1/sessions/{sid}/turns", json={"user_id": user, "messages": messages})
    assert r.status_code == 201
    r = await client.post(f"/v1/sessions/{sid}/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    await settle(client, engine)


async def memories(client: httpx.AsyncClient, user: str) -> list[dict]:
    r = await client.get(f"/v1/users/{user}/memories", params={"limit": 50})
    return [m for m in r.json()["memories"] if m["kind"] != "episode"]


async def test_promoted_memories_reach_the_same_user_only(
    live: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await session(
        live,
        engine,
        "trip-1",
        "alice",
        [
            "I'm allergic to peanuts.",
            "I always prefer aisle seats.",
            "Book the 10:05 flight to Tokyo.",
        ],
    )
    texts = [m["text"] for m in await memories(live, "alice")]
    assert any("allergic to peanuts" in t for t in texts)
    assert any("aisle seats" in t for t in texts)
    assert not any("10:05" in t for t in texts)  # a task detail, not a standing fact

    # A later session of alice: the pinned allergy is always in her context.
    await live.post(
        "/v1/sessions/trip-2/turns",
        json={
            "user_id": "alice",
            "messages": [{"role": "user", "content": "Please order lunch for the flight."}],
        },
    )
    await settle(live, engine)
    ctx = (await live.get("/v1/sessions/trip-2/context")).json()
    assert "memories" in [b["kind"] for b in ctx["blocks"]]
    assert "allergic to peanuts" in ctx["messages"][0]["content"]
    assert ctx["memory_ids"]
    assert "mnemo_memory_retrieval_hits_total" in (await live.get("/metrics")).text
    # Bob never sees it.
    await live.post(
        "/v1/sessions/bob-1/turns",
        json={
            "user_id": "bob",
            "messages": [
                {"role": "user", "content": "Please order lunch for the flight, any allergies?"}
            ],
        },
    )
    await settle(live, engine)
    bob = (await live.get("/v1/sessions/bob-1/context")).json()
    assert "peanuts" not in bob["text"]
    assert (await live.get("/v1/users/bob/memories")).json()["memories"] == [] or all(
        "peanut" not in m["text"]
        for m in (await live.get("/v1/users/bob/memories")).json()["memories"]
    )


@pytest.mark.parametrize(
    ("first", "restated", "contradicted", "new_value"),
    [
        (
            "I always prefer aisle seats.",
            "I always prefer aisle seats.",
            "From now on I always prefer window seats.",
            "window",
        ),
        (
            "我以后都喜欢靠过道的座位。",
            "我以后都喜欢靠过道的座位。",
            "我以后都不喜欢靠过道的座位。",
            "不喜欢",
        ),
    ],
    ids=["en", "zh"],
)
async def test_restatement_confirms_and_contradiction_supersedes(
    live: httpx.AsyncClient,
    engine: AsyncEngine,
    first: str,
    restated: str,
    contradicted: str,
    new_value: str,
) -> None:
    await session(live, engine, "s1", "carol", [first])
    before = await memories(live, "carol")
    assert len(before) == 1 and before[0]["times_confirmed"] == 1

    await session(live, engine, "s2", "carol", [restated])
    after = await memories(live, "carol")
    assert len(after) == 1 and after[0]["id"] == before[0]["id"]
    assert after[0]["times_confirmed"] >= 2

    await session(live, engine, "s3", "carol", [contradicted])
    current = await memories(live, "carol")
    assert len(current) == 1 and new_value in current[0]["text"]
    async with engine.connect() as conn:
        old = (
            await conn.execute(
                text("SELECT superseded_by FROM memories WHERE id = :id"), {"id": before[0]["id"]}
            )
        ).scalar_one()
    assert old == current[0]["id"]  # the old one points to its successor
    found = (await live.get("/v1/users/carol/memories", params={"query": first})).json()
    assert all(m["id"] != before[0]["id"] for m in found["memories"])


async def test_episodes_keep_provenance_and_are_found_by_meaning(
    live: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    msgs = [
        {
            "role": "user",
            "content": "Let's plan the garden: tomatoes along the south fence.",
            "metadata": {"dataset_id": "D1:1"},
        },
        {
            "role": "assistant",
            "content": "Tomatoes need six hours of sun; the south fence works.",
            "metadata": {"dataset_id": "D1:2"},
        },
        {
            "role": "user",
            "content": "Also my sister Ana visits from Lisbon in May.",
            "metadata": {"dataset_id": "D1:3"},
        },
    ]
    await live.post("/v1/sessions/g/turns", json={"user_id": "dan", "messages": msgs})
    await settle(live, engine)
    r = await live.get(
        "/v1/users/dan/memories",
        params={"query": "where are the tomatoes planted?", "kind": "episode"},
    )
    top = r.json()["memories"][0]
    assert "tomatoes" in top["text"].lower()
    assert top["source"]["session_id"] == "g" and "D1:1" in top["source"]["dataset_ids"]
    assert top["source"]["seqs"][0] == 1


async def test_a_sessions_own_episodes_are_not_in_its_context(
    live: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    msgs = [
        {"role": "user", "content": f"The garden plan, part {i}: tomatoes and basil."}
        for i in range(6)
    ]
    await live.post("/v1/sessions/g/turns", json={"user_id": "eve", "messages": msgs})
    await settle(live, engine)
    assert (await live.get("/v1/users/eve/memories", params={"kind": "episode"})).json()["memories"]
    ctx = (await live.get("/v1/sessions/g/context", params={"query": "garden tomatoes"})).json()
    assert ctx["memory_ids"] == []  # nothing from its own past: that is the archive's job
    await live.post(
        "/v1/sessions/g2/turns",
        json={
            "user_id": "eve",
            "messages": [{"role": "user", "content": "What did we plan for the garden?"}],
        },
    )
    await settle(live, engine)
    other = (await live.get("/v1/sessions/g2/context", params={"query": "garden plan"})).json()
    assert other["memory_ids"]  # a later session does see it


async def test_recompressing_a_session_does_not_reconfirm_what_nobody_restated(
    live: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await session(live, engine, "r1", "fay", ["I'm allergic to shellfish."])
    filler = [
        {"role": "user", "content": f"Next step {i}: check the logs.", "id": f"x{i}"}
        for i in range(8)
    ]
    await live.post("/v1/sessions/r1/turns", json={"user_id": "fay", "messages": filler})
    r = await live.post("/v1/sessions/r1/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    await settle(live, engine)
    [memory] = [m for m in await memories(live, "fay") if "shellfish" in m["text"]]
    assert memory["times_confirmed"] == 1

    again = [
        {"role": "user", "content": "Remember, I'm allergic to shellfish.", "id": "y1"},
        *[{"role": "user", "content": f"more {i}", "id": f"y{i + 2}"} for i in range(4)],
    ]
    await live.post("/v1/sessions/r1/turns", json={"user_id": "fay", "messages": again})
    await live.post("/v1/sessions/r1/compact", params={"wait": "true"})
    await settle(live, engine)
    shellfish = [m for m in await memories(live, "fay") if "shellfish" in m["text"]]
    assert len(shellfish) == 1 and shellfish[0]["times_confirmed"] == 2


async def test_topic_drift_away_from_the_goal_triggers_a_compression(
    live: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    work = [
        "Help me train a sentiment classifier on the product reviews dataset.",
        "Use the reviews from 2024 only.",
        "Split the reviews into train and validation sets.",
        "Tokenize the review text with the BERT tokenizer.",
        "Train for three epochs with a small learning rate.",
    ]
    await session(live, engine, "t", "gil", work)
    before = (await live.get("/v1/sessions/t/events")).json()["events"]
    assert all(e["trigger"] != "topic_drift" for e in before)

    await live.post(
        "/v1/sessions/t/turns",
        json={
            "user_id": "gil",
            "messages": [
                {
                    "role": "user",
                    "content": "Also, the classifier should report precision per class.",
                }
            ],
        },
    )
    await settle(live, engine)
    related = (await live.get("/v1/sessions/t/events")).json()["events"]
    assert all(e["trigger"] != "topic_drift" for e in related)  # still on topic

    await live.post(
        "/v1/sessions/t/turns",
        json={
            "user_id": "gil",
            "messages": [
                {"role": "user", "content": "What is a good recipe for banana bread with walnuts?"}
            ],
        },
    )
    await settle(live, engine)
    events = (await live.get("/v1/sessions/t/events")).json()["events"]
    assert events[0]["trigger"] == "topic_drift"

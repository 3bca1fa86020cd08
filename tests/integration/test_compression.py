"""The compressor end to end through HTTP: long sessions posted turn by turn, in
English and Chinese, compressed by the real worker; the context must state every
constraint, mark completed actions done, keep pending items pending and show only
current parameter values as current."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.tokens import count_messages_tokens
from app.core.turns import TurnView
from app.wiring import create_app
from tests.conftest import make_settings
from tests.unit.compression.test_session import EN_SESSION, ZH_SESSION


def as_message(turn: TurnView, i: int, prefix: str = "m") -> dict[str, Any]:
    m: dict[str, Any] = {"role": turn.role, "content": turn.content, "id": f"{prefix}{i}"}
    if turn.tool_calls:
        m["tool_calls"] = turn.tool_calls
    if turn.tool_call_id:
        m["tool_call_id"] = turn.tool_call_id
    if turn.emphasized:
        m["emphasized"] = True
    return m


SMALL_WINDOW = {
    "model_window_tokens": 2048,
    "system_prompt_tokens": 200,
    "tool_schema_tokens": 100,
    "reserved_output_tokens": 500,
    "embedded_worker": True,
}


@pytest.fixture
async def live(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its worker running, and a model window small enough to compress often."""
    app = create_app(make_settings(db_url, **SMALL_WINDOW), database_url=db_url, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as c:
            yield c


async def settle(client: httpx.AsyncClient, session: str, timeout_s: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (await client.get(f"/v1/sessions/{session}")).json()["pending_jobs"]:
        assert asyncio.get_running_loop().time() < deadline, "jobs did not finish"
        await asyncio.sleep(0.05)


async def post_one_by_one(
    client: httpx.AsyncClient,
    session: str,
    turns: list[TurnView],
    prefix: str = "m",
    wait: bool = True,
) -> None:
    for i, turn in enumerate(turns):
        r = await client.post(
            f"/v1/sessions/{session}/turns",
            json={"user_id": "u-1", "messages": [as_message(turn, i, prefix)]},
        )
        assert r.status_code == 201, r.text
        if wait and r.json()["compression_scheduled"]:
            await settle(client, session)  # as an agent's next turn would come later


async def context(client: httpx.AsyncClient, session: str, budget: int = 2500) -> dict[str, Any]:
    r = await client.get(f"/v1/sessions/{session}/context", params={"max_tokens": budget})
    assert r.status_code == 200
    ctx = r.json()
    assert ctx["tokens"] <= budget and ctx["tokens"] == count_messages_tokens(ctx["messages"])
    return ctx


async def test_english_session_through_http(live: httpx.AsyncClient, engine: AsyncEngine) -> None:
    await post_one_by_one(live, "trip", EN_SESSION)
    r = await live.post("/v1/sessions/trip/compact", params={"wait": "true"})
    assert r.status_code == 200 and r.json()["status"] in ("compressed", "nothing_to_compress")
    ctx = await context(live, "trip")
    state_text = ctx["messages"][0]["content"]
    assert ctx["messages"][0]["role"] == "system" and ctx["state_version"] >= 2
    for rule in (
        "Never book red-eye flights.",
        "Only use refundable rates for hotels.",
        "Always confirm before paying.",
        "make sure the hotel has a gym",
    ):
        assert rule in state_text, rule
    assert "allergic to peanuts" in state_text
    done = [line for line in state_text.splitlines() if line.startswith("Done ")]
    assert any("book_flight" in line and "QX7T2L" in line for line in done)
    assert any(
        line.startswith("Pending: ") and "reserve" in line for line in state_text.splitlines()
    )
    assert "$250 (was $200" in state_text
    assert "lorem ipsum" not in ctx["text"]  # the 120-result tool dump is not in the context
    for noise in ("keyboard", "weather"):
        assert noise not in ctx["text"], noise

    # Never a compacted turn and its raw text: the raw part is exactly the live turns.
    async with engine.connect() as conn:
        live_turns = (
            await conn.execute(text("SELECT count(*) FROM turns WHERE NOT compacted"))
        ).scalar_one()
        total = (await conn.execute(text("SELECT count(*) FROM turns"))).scalar_one()
    assert live_turns == 3 and total == len(EN_SESSION)  # the archive keeps everything
    assert len(ctx["messages"]) - 1 <= live_turns

    session = (await live.get("/v1/sessions/trip")).json()
    assert session["last_compression_at"] is not None and session["history_tokens"] < 400


async def test_chinese_session_through_http(live: httpx.AsyncClient) -> None:
    await post_one_by_one(live, "train", ZH_SESSION)
    await live.post("/v1/sessions/train/compact", params={"wait": "true"})
    ctx = await context(live, "train")
    state_text = ctx["messages"][0]["content"]
    lines = state_text.splitlines()
    assert "千万不要用测试集调参" in state_text and "只能用 CPU 做推理" in state_text
    assert "青霉素过敏" in state_text
    assert any(line.startswith("已完成 train(") and "batch_size=16" in line for line in lines)
    assert any(line.startswith("已完成 upload(") for line in lines)
    assert "batch size：16 (原为 32)" in state_text
    assert "学习率：2e-5 (原为 3e-4)" in state_text
    assert any(line.startswith("待确认：") and "重新训练" in line for line in lines)
    for noise in ("天气", "辛苦"):
        assert noise not in ctx["text"], noise
    assert "再见" not in state_text  # it is only in the raw working window


async def test_events_audit_each_compression(live: httpx.AsyncClient) -> None:
    await post_one_by_one(live, "trip", EN_SESSION)
    r = await live.post("/v1/sessions/trip/compact", params={"wait": "true"})
    listed = (await live.get("/v1/sessions/trip/events")).json()["events"]
    assert len(listed) >= 2
    assert [e["id"] for e in listed] == sorted((e["id"] for e in listed), reverse=True)
    tiers = [e["tier"] for e in reversed(listed)]
    assert tiers[:3] == [1, 2, 3][: len(tiers[:3])]  # 30%, then 50%, then all but the window
    for e in listed:
        assert e["extractor"] == "rules" and e["fallback_reason"] is None
        assert e["input_tokens"] > 0 and e["output_tokens"] > 0
        assert e["ratio"] == pytest.approx(e["input_tokens"] / e["output_tokens"], rel=0.01)
        assert e["change_summary"] and e["duration_ms"] >= 0
    first = (await live.get(f"/v1/sessions/trip/events/{listed[-1]['id']}")).json()
    assert first["turn_ids"] and first["turn_seqs"] == sorted(first["turn_seqs"])
    assert first["units"] and all("kind" in u for u in first["units"])
    assert first["rendered_state"].startswith("## Task state")
    seqs = [
        s
        for e in listed
        for s in (await live.get(f"/v1/sessions/trip/events/{e['id']}")).json()["turn_seqs"]
    ]
    assert len(seqs) == len(set(seqs))  # no turn compressed twice
    assert (await live.get("/v1/sessions/trip/events/999999")).status_code == 404
    if r.json()["status"] == "compressed":
        assert r.json()["trigger"] == "manual"


async def test_compact_without_wait_is_202_and_short_sessions_have_nothing(
    live: httpx.AsyncClient,
) -> None:
    await live.post(
        "/v1/sessions/s/turns",
        json={"user_id": "u", "messages": [{"role": "user", "content": "Never use tabs."}]},
    )
    r = await live.post("/v1/sessions/s/compact")
    assert r.status_code == 202 and r.json()["status"] == "scheduled"
    await settle(live, "s")
    r = await live.post("/v1/sessions/s/compact", params={"wait": "true"})
    assert r.json()["status"] == "nothing_to_compress"  # all inside the working window
    assert (await live.post("/v1/sessions/nope/compact")).status_code == 404


async def test_context_stays_flat_as_the_session_grows(live: httpx.AsyncClient) -> None:
    sizes = []
    for rounds in range(4):
        # Each round repeats the session's talk (fresh ids, fresh tool call ids).
        turns = [
            dataclasses.replace(
                t,
                tool_calls=_renamed(t.tool_calls, rounds),
                tool_call_id=f"{t.tool_call_id}-{rounds}" if t.tool_call_id else None,
            )
            for t in EN_SESSION
        ]
        await post_one_by_one(live, "long", turns, prefix=f"r{rounds}-", wait=False)
        await settle(live, "long")
        ctx = await context(live, "long", 1500)
        sizes.append((ctx["full_history_tokens"], ctx["tokens"]))
    histories = [h for h, _ in sizes]
    contexts = [c for _, c in sizes]
    assert histories[-1] > 3 * histories[0]
    assert max(contexts) <= 1500 and contexts[-1] < histories[-1] / 4


def _renamed(calls: list[dict[str, Any]] | None, round_: int) -> list[dict[str, Any]] | None:
    if not calls:
        return calls
    return [{**c, "id": f"{c['id']}-{round_}"} for c in calls]


async def test_compression_through_a_scripted_llm_and_its_failure(
    db_url: str, engine: AsyncEngine
) -> None:
    """The worker uses the configured LLM; when it fails, the rules take over, on the record."""
    from tests.fakes.openai_server import malformed, serve_scripted_llm, units

    with serve_scripted_llm() as llm:
        settings = make_settings(
            db_url,
            **SMALL_WINDOW,
            llm_base_url=llm.base_url,
            llm_model="tiny",
            llm_max_retries=1,
            llm_timeout_s=5,
        )
        app = create_app(settings, database_url=db_url, engine=engine)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://m") as c:
                msgs = [{"role": "user", "content": f"step {i}: keep going"} for i in range(8)]
                msgs[0]["content"] = "Never deploy on Fridays."
                await c.post("/v1/sessions/s/turns", json={"user_id": "u", "messages": msgs})
                llm.script(
                    units(
                        {
                            "kind": "constraint",
                            "text": "Never deploy on Fridays.",
                            "source_seqs": [1],
                        }
                    )
                )
                r = (await c.post("/v1/sessions/s/compact", params={"wait": "true"})).json()
                assert r["status"] == "compressed"
                assert r["extractor"] == "llm:tiny" and r["fallback_reason"] is None
                assert "Never deploy on Fridays." in r["rendered_state"]
                assert "step 1" in llm.requests[0]["messages"][-1]["content"]
                # The tokens the API reported for this compression's one call (the fake
                # reports characters).
                assert r["llm_prompt_tokens"] == len(json.dumps(llm.requests[0]["messages"]))
                assert r["llm_completion_tokens"] > 0

                more = [
                    {"role": "user", "content": f"Always run the tests first ({i})."}
                    for i in range(6)
                ]
                await c.post("/v1/sessions/s/turns", json={"user_id": "u", "messages": more})
                llm.script(malformed(), malformed())  # 1 + llm_max_retries bad replies
                r = (await c.post("/v1/sessions/s/compact", params={"wait": "true"})).json()
                assert r["status"] == "compressed" and r["extractor"] == "rules"
                assert r["fallback_reason"].startswith("llm: invalid output")
                assert "Always run the tests first" in r["rendered_state"]
                assert "Never deploy on Fridays." in r["rendered_state"]  # nothing lost
                # Both failed calls were billed, and are counted.
                prompts = [len(json.dumps(q["messages"])) for q in llm.requests]
                assert len(prompts) == 3 and r["llm_prompt_tokens"] == sum(prompts[1:])
                metrics = (await c.get("/metrics")).text
                assert "mnemo_extractor_fallbacks_total 1.0" in metrics
                assert 'mnemo_llm_calls_total{outcome="ok"} 3.0' in metrics
                assert f'mnemo_llm_tokens_total{{kind="prompt"}} {sum(prompts)}.0' in metrics
                assert (
                    'mnemo_compressions_total{extractor="llm:tiny",trigger="manual"} 1.0' in metrics
                )

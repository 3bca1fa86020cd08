"""Several agents, one task, through HTTP: a planner, a booker and a reviewer, each in
its own session with its own agent-bound key. Every agent's context holds the shared
constraints and every write action any agent of the task did, and none of the other
agents' private items; a reader never writes the shared state."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.stores import api_keys as keys
from tests.integration.test_change_notice import with_worker

Headers = dict[str, str]


@pytest.fixture
async def live(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    async for c in with_worker(db_url, engine, worker_concurrency=3):
        yield c


async def make_keys(
    client: httpx.AsyncClient, engine: AsyncEngine, *specs: tuple[str, str | None]
) -> list[Headers]:
    """Keys of (tenant, agent or None), as request headers."""
    async with engine.begin() as conn:
        made = [await keys.create_key(conn, tenant=t, scope="agent", agent=a) for t, a in specs]
    client._transport.app.state.guard.forget()  # type: ignore[attr-defined]
    return [{"Authorization": f"Bearer {k}"} for k in made]


def call(call_id: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result(call_id: str, **fields: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(fields)}


@dataclass(frozen=True)
class Scenario:
    """What each agent says, and what must (or must not) reach the others."""

    planner: list[dict[str, Any]]
    booker: list[dict[str, Any]]
    reviewer: list[dict[str, Any]]
    shared_constraint: str  # a word of the planner's constraint
    write_marks: tuple[str, ...]  # the booker's write action (tool and its id)
    planner_private: str  # the planner's read-only lookup (private: not a write)
    booker_private: str  # the booker's read-only lookup
    reviewer_private: str  # a word of the reviewer's own constraint


def chatter(n: int, lang: str) -> list[dict[str, Any]]:
    en = ["Thanks, go on.", "Understood.", "Okay, next step please."]
    zh = ["好的，继续。", "明白。", "好，下一步。"]
    lines = en if lang == "en" else zh
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": lines[i % len(lines)]}
        for i in range(n)
    ]


EN = Scenario(
    planner=[
        {"role": "user", "content": "Organise a sales trip to Porto for four people."},
        {"role": "user", "content": "Never choose a hotel more than 2 km from the venue."},
        call("p1", "search_venues", city="Porto", topic="quietcorner"),
        result("p1", venues=["quietcorner hall"]),
        *chatter(4, "en"),
    ],
    booker=[
        {"role": "user", "content": "Book the rooms for the Porto trip."},
        call("b1", "check_rates", city="Porto", season="lowtide"),
        result("b1", rate=95, season="lowtide"),
        call("b2", "book_hotel", hotel="Ribeira Inn", rooms=4),
        result("b2", confirmation="RX7731", status="confirmed"),
        *chatter(4, "en"),
    ],
    reviewer=[
        {"role": "user", "content": "Review the trip plan before it goes out."},
        {"role": "user", "content": "Never approve anything without a receipt from finance."},
        *chatter(4, "en"),
    ],
    shared_constraint="2 km",
    write_marks=("book_hotel", "RX7731"),
    planner_private="search_venues",
    booker_private="check_rates",
    reviewer_private="receipt",
)

ZH = Scenario(
    planner=[
        {"role": "user", "content": "安排四个人去成都出差。"},
        {"role": "user", "content": "酒店离会场不能超过 2 公里。"},
        call("p1", "search_venues", city="成都", topic="竹林厅"),
        result("p1", venues=["竹林厅"]),
        *chatter(4, "zh"),
    ],
    booker=[
        {"role": "user", "content": "帮我订成都出差的房间。"},
        call("b1", "check_rates", city="成都", season="淡季价"),
        result("b1", rate=380, season="淡季价"),
        call("b2", "book_hotel", hotel="锦江宾馆", rooms=4),
        result("b2", confirmation="CD5582", status="confirmed"),
        *chatter(4, "zh"),
    ],
    reviewer=[
        {"role": "user", "content": "出发前审核一下行程。"},
        {"role": "user", "content": "没有财务发票的报销一律不能批准。"},
        *chatter(4, "zh"),
    ],
    shared_constraint="2 公里",
    write_marks=("book_hotel", "CD5582"),
    planner_private="search_venues",
    booker_private="check_rates",
    reviewer_private="发票",
)


async def system_of(client: httpx.AsyncClient, session: str, headers: Headers) -> str:
    r = await client.get(
        f"/v1/sessions/{session}/context", params={"max_tokens": 3000}, headers=headers
    )
    assert r.status_code == 200, r.text
    first = r.json()["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


async def join(
    client: httpx.AsyncClient,
    task: str,
    session: str,
    headers: Headers,
    turns: list[dict[str, Any]],
    user: str = "u-1",
) -> None:
    """The agent of ``headers`` posts ``turns`` to its session and attaches it to ``task``."""
    r = await client.post(
        f"/v1/sessions/{session}/turns", json={"user_id": user, "messages": turns}, headers=headers
    )
    assert r.status_code == 201, r.text
    r = await client.post(
        f"/v1/tasks/{task}/sessions", json={"session_id": session}, headers=headers
    )
    assert r.status_code == 200, r.text


async def run_scenario(
    client: httpx.AsyncClient, engine: AsyncEngine, s: Scenario, task: str
) -> dict[str, tuple[str, Headers]]:
    boss, planner, booker, reviewer = await make_keys(
        client, engine, ("t", None), ("t", "planner"), ("t", "booker"), ("t", "reviewer")
    )
    r = await client.post(
        "/v1/tasks",
        json={
            "task_id": task,
            "agents": [
                {"agent": "planner", "role": "contributor"},
                {"agent": "booker", "role": "contributor"},
                {"agent": "reviewer", "role": "reader"},
            ],
        },
        headers=boss,
    )
    assert r.status_code == 201, r.text
    agents = {
        "planner": (f"{task}-plan", planner, s.planner),
        "booker": (f"{task}-book", booker, s.booker),
        "reviewer": (f"{task}-review", reviewer, s.reviewer),
    }
    for session, headers, turns in agents.values():
        await join(client, task, session, headers, turns)
    for session, headers, _ in agents.values():
        r = await client.post(
            f"/v1/sessions/{session}/compact", params={"wait": "true"}, headers=headers
        )
        assert r.status_code == 200 and r.json()["status"] == "compressed", r.text
    return {name: (session, headers) for name, (session, headers, _) in agents.items()}


@pytest.mark.parametrize("scenario", [EN, ZH], ids=["en", "zh"])
async def test_three_agents_share_the_task_and_keep_their_own(
    live: httpx.AsyncClient, engine: AsyncEngine, scenario: Scenario
) -> None:
    agents = await run_scenario(live, engine, scenario, "trip")
    contexts = {name: await system_of(live, *agents[name]) for name in agents}
    privates = {
        "planner": scenario.planner_private,
        "booker": scenario.booker_private,
        "reviewer": scenario.reviewer_private,
    }
    for name, text in contexts.items():
        assert scenario.shared_constraint in text, (name, text)
        for mark in scenario.write_marks:
            assert mark in text, (name, mark, text)
        for other, private in privates.items():
            if other != name:
                assert private not in text, (name, other, text)
        # Its own private items are in its own context.
        assert privates[name] in text, (name, text)

    r = await live.get("/v1/tasks/trip/state", headers=agents["reviewer"][1])
    assert r.status_code == 200, r.text
    body = r.json()
    # The reader wrote nothing; the constraint came from the planner, the booking
    # from the booker, each with the session and turn it came from.
    by_agent = {c["agent"] for item in body["attribution"] for c in item["contributors"]}
    assert by_agent == {"planner", "booker"}
    booking = [i for i in body["attribution"] if i["section"] == "actions"]
    assert [(c["agent"], c["session_id"]) for i in booking for c in i["contributors"]] == [
        ("booker", "trip-book")
    ] * len(booking[0]["contributors"])
    assert scenario.reviewer_private not in json.dumps(body, ensure_ascii=False)
    events = (await live.get("/v1/tasks/trip/events", headers=agents["planner"][1])).json()
    assert {e["agent"] for e in events["events"]} == {"planner", "booker"}

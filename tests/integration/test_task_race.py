"""Concurrent compressions of sibling sessions never lose a shared item: three sessions
of one task, each adding a constraint per round, compressed at once, 50 rounds."""

from __future__ import annotations

import asyncio

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.test_tasks import join, live, make_keys

__all__ = ["live"]

ROUNDS = 50
AGENTS = ("alpha", "beta", "gamma")


async def test_sibling_compressions_lose_no_shared_item(
    live: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    boss, *agents = await make_keys(live, engine, ("t", None), *[("t", a) for a in AGENTS])
    members = [{"agent": a, "role": "contributor"} for a in AGENTS]
    r = await live.post("/v1/tasks", json={"task_id": "race", "agents": members}, headers=boss)
    assert r.status_code == 201, r.text
    for name, headers in zip(AGENTS, agents, strict=True):
        first = [{"role": "user", "content": "Let us start."}]
        await join(live, "race", f"s-{name}", headers, first, user="u")

    async def one(name: str, headers: dict[str, str], round_: int) -> None:
        number = 1000 * (AGENTS.index(name) + 1) + round_
        turns = [
            {"role": "user", "content": f"Never exceed {number} units on that line."},
            *[{"role": "assistant", "content": "Okay."}] * 3,
        ]
        r = await live.post(
            f"/v1/sessions/s-{name}/turns",
            json={"user_id": "u", "messages": turns},
            headers=headers,
        )
        assert r.status_code == 201, r.text
        r = await live.post(
            f"/v1/sessions/s-{name}/compact", params={"wait": "true"}, headers=headers
        )
        assert r.status_code == 200, r.text

    for round_ in range(ROUNDS):
        await asyncio.gather(
            *(one(name, headers, round_) for name, headers in zip(AGENTS, agents, strict=True))
        )

    shared = (await live.get("/v1/tasks/race/state", headers=boss)).json()
    texts = [c["text"] for c in shared["state"]["constraints"]]
    expected = {
        f"Never exceed {1000 * (i + 1) + r} units on that line."
        for i in range(len(AGENTS))
        for r in range(ROUNDS)
    }
    assert set(texts) == expected, sorted(expected - set(texts))[:5]
    assert len(texts) == len(expected)
    # Every constraint is credited to the agent whose session said it.
    for item in (a for a in shared["attribution"] if a["section"] == "constraints"):
        number = int(item["text"].split()[2])
        [credit] = item["contributors"]
        assert credit["agent"] == AGENTS[number // 1000 - 1]
        assert credit["session_id"] == f"s-{credit['agent']}"
    events = (await live.get("/v1/tasks/race/events", params={"limit": 200}, headers=boss)).json()
    assert len(events["events"]) == shared["version"] == len(AGENTS) * ROUNDS

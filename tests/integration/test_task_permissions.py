"""The permission matrix of tasks and agent-bound keys, route by route: a reader, a
contributor, an agent of another task and another tenant, each against every /v1/tasks
route and against another agent's session on every /v1/sessions route."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.test_isolation import app_of
from tests.integration.test_tasks import call, join, live, make_keys, result

__all__ = ["live"]

CALLERS = ("reader", "contributor", "foreign_task", "foreign_tenant")

# (method, path template, body) → expected status per caller, on task t1 and the
# planner's session s-plan (neither belongs to any of these callers).
TASK_ROUTES: dict[tuple[str, str], tuple[str, dict | None, dict[str, int]]] = {
    ("POST", "/v1/tasks"): (
        "/v1/tasks",
        {"task_id": "t9"},
        {"reader": 403, "contributor": 403, "foreign_task": 403, "foreign_tenant": 201},
    ),
    ("GET", "/v1/tasks/{task_id}"): (
        "/v1/tasks/t1",
        None,
        {"reader": 200, "contributor": 200, "foreign_task": 404, "foreign_tenant": 404},
    ),
    ("PUT", "/v1/tasks/{task_id}/agents/{agent_name}"): (
        "/v1/tasks/t1/agents/reviewer",
        {"role": "contributor"},
        {"reader": 403, "contributor": 403, "foreign_task": 403, "foreign_tenant": 404},
    ),
    ("POST", "/v1/tasks/{task_id}/sessions"): (
        "/v1/tasks/t1/sessions",
        {"session_id": "{own}"},
        {"reader": 200, "contributor": 200, "foreign_task": 404, "foreign_tenant": 404},
    ),
    ("GET", "/v1/tasks/{task_id}/state"): (
        "/v1/tasks/t1/state",
        None,
        {"reader": 200, "contributor": 200, "foreign_task": 404, "foreign_tenant": 404},
    ),
    ("GET", "/v1/tasks/{task_id}/events"): (
        "/v1/tasks/t1/events",
        None,
        {"reader": 200, "contributor": 200, "foreign_task": 404, "foreign_tenant": 404},
    ),
}

# Another agent's session: 404 for every caller on every route, as if it did not exist
# (in this order: the reads before the post and the delete).
SESSION_ROUTES = [
    ("GET", "/v1/sessions/s-plan", None),
    ("GET", "/v1/sessions/s-plan/context", None),
    ("GET", "/v1/sessions/s-plan/state", None),
    ("GET", "/v1/sessions/s-plan/turns", None),
    ("GET", "/v1/sessions/s-plan/events", None),
    ("GET", "/v1/sessions/s-plan/events/{event}", None),
    ("POST", "/v1/sessions/s-plan/compact", None),
    ("POST", "/v1/sessions/s-plan/misses", {"needed": "the 9 am call"}),
    ("DELETE", "/v1/sessions/s-plan/turns/last", None),  # a pop
    (
        "POST",
        "/v1/sessions/s-plan/turns",
        {"user_id": "u-1", "messages": [{"role": "user", "content": "intrusion"}]},
    ),
    ("DELETE", "/v1/sessions/s-plan", None),
]


async def _setup(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> tuple[dict[str, dict[str, str]], dict[str, str], int, dict[str, str]]:
    boss, planner, reviewer, booker, outsider, stranger = await make_keys(
        client,
        engine,
        ("t", None),
        ("t", "planner"),
        ("t", "reviewer"),
        ("t", "booker"),
        ("t", "outsider"),
        ("other", None),
    )
    members = [
        {"agent": "planner", "role": "contributor"},
        {"agent": "reviewer", "role": "reader"},
        {"agent": "booker", "role": "contributor", "sections": ["actions"]},
    ]
    r = await client.post("/v1/tasks", json={"task_id": "t1", "agents": members}, headers=boss)
    assert r.status_code == 201, r.text
    outsiders = [{"agent": "outsider", "role": "contributor"}]
    r = await client.post("/v1/tasks", json={"task_id": "t2", "agents": outsiders}, headers=boss)
    assert r.status_code == 201, r.text
    sessions = {
        "s-plan": (planner, "t1"),
        "s-rev": (reviewer, "t1"),
        "s-book": (booker, "t1"),
        "s-out": (outsider, "t2"),
    }
    for session, (headers, task) in sessions.items():
        turns = [{"role": "user", "content": f"Turn of {session}, never skip the 9 am call."}]
        turns += [{"role": "assistant", "content": "Noted."}] * 4
        await join(client, task, session, headers, turns)
    r = await client.post("/v1/sessions/s-plan/compact", params={"wait": "true"}, headers=planner)
    assert r.status_code == 200, r.text
    event = int(r.json()["id"])
    callers = {
        "reader": reviewer,
        "contributor": booker,
        "foreign_task": outsider,
        "foreign_tenant": stranger,
    }
    own = {
        "reader": "s-rev",
        "contributor": "s-book",
        "foreign_task": "s-out",
        "foreign_tenant": "s-x",
    }
    return callers, own, event, planner


async def test_permission_matrix(live: httpx.AsyncClient, engine: AsyncEngine) -> None:
    paths = app_of(live).openapi()["paths"]
    task_routes = {
        (method.upper(), path)
        for path, operations in paths.items()
        if path.startswith("/v1/tasks")
        for method in operations
    }
    assert task_routes == set(TASK_ROUTES), "add the new route to TASK_ROUTES"
    callers, own, event, planner = await _setup(live, engine)
    plan_turns = (await live.get("/v1/sessions/s-plan", headers=planner)).json()["turn_count"]

    for caller, headers in callers.items():
        for (method, _), (path, body, expected) in TASK_ROUTES.items():
            payload = {k: v.format(own=own[caller]) for k, v in body.items()} if body else None
            r = await live.request(method, path, json=payload, headers=headers)
            assert r.status_code == expected[caller], (caller, method, path, r.text)
            assert "never skip" not in r.text or caller in ("reader", "contributor"), r.text
        for method, path, body in SESSION_ROUTES:
            url = path.format(event=event)
            r = await live.request(method, url, json=body, headers=headers)
            # Another tenant's post creates a session of its own under that name (and
            # may delete it); it still never reaches the planner's.
            expected = {"POST": 201, "DELETE": 204} if caller == "foreign_tenant" else {}
            status = (
                404
                if url.endswith(("compact", "misses", "turns/last"))
                else expected.get(method, 404)
            )
            assert r.status_code == status, (caller, method, url, r.text)
            assert "s-plan, never skip" not in r.text

    # Nothing of the planner's changed; nothing was posted into its session.
    r = await live.get("/v1/sessions/s-plan", headers=planner)
    assert r.json()["turn_count"] == plan_turns
    # A reader may attach only its own sessions, and only as itself.
    reader = callers["reader"]
    r = await live.post("/v1/tasks/t1/sessions", json={"session_id": "s-plan"}, headers=reader)
    assert r.status_code == 404, r.text
    r = await live.post(
        "/v1/tasks/t1/sessions", json={"session_id": "s-rev", "agent": "planner"}, headers=reader
    )
    assert r.status_code == 403, r.text


@pytest.mark.parametrize("who", ["reader", "sections"])
async def test_who_writes_what_to_the_shared_state(
    live: httpx.AsyncClient, engine: AsyncEngine, who: str
) -> None:
    """A reader's compression never writes the shared state; a contributor limited to
    the ledger writes its write actions and not its constraints."""
    boss, agent = await make_keys(live, engine, ("t", None), ("t", "bot"))
    member = {"agent": "bot", "role": "reader"}
    if who == "sections":
        member = {"agent": "bot", "role": "contributor", "sections": ["actions"]}
    r = await live.post("/v1/tasks", json={"task_id": "tw", "agents": [member]}, headers=boss)
    assert r.status_code == 201, r.text
    turns = [
        {"role": "user", "content": "Never pay more than 300 euros for a seat."},
        call("c1", "book_seat", seat="14C"),
        result("c1", ticket="TK9920", status="confirmed"),
        *[{"role": "assistant", "content": "Done."}] * 4,
    ]
    r = await live.post(
        "/v1/sessions/s-bot/turns", json={"user_id": "u-1", "messages": turns}, headers=agent
    )
    assert r.status_code == 201
    r = await live.post("/v1/tasks/tw/sessions", json={"session_id": "s-bot"}, headers=agent)
    assert r.status_code == 200, r.text
    r = await live.post("/v1/sessions/s-bot/compact", params={"wait": "true"}, headers=agent)
    assert r.status_code == 200 and r.json()["status"] == "compressed", r.text
    shared = (await live.get("/v1/tasks/tw/state", headers=agent)).json()
    own = (await live.get("/v1/sessions/s-bot/state", headers=agent)).json()["state"]
    assert "300 euros" in str(own["constraints"])  # its own state has it
    assert shared["state"]["constraints"] == []
    if who == "reader":
        assert shared["version"] == 0 and shared["attribution"] == []
    else:
        assert [a["tool"] for a in shared["state"]["actions"]] == ["book_seat"]
        [item] = shared["attribution"]
        assert item["contributors"][0]["agent"] == "bot"
        assert item["contributors"][0]["session_id"] == "s-bot"
    # Either way, its own context shows the constraint exactly once.
    context = (await live.get("/v1/sessions/s-bot/context", headers=agent)).json()
    assert context["messages"][0]["content"].count("300 euros") == 1

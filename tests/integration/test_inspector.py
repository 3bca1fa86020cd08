"""The inspector (/ui): login, tenant isolation on every route, and what its pages show."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import pytest
from fastapi.routing import APIRoute
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.config import Settings
from app.stores import queue
from app.wiring import build_worker
from app.worker import Worker
from tests.integration.test_auth import app_of, bearer, make_key


@dataclass
class Seeded:
    admin: str  # admin key of the tenant that owns the data
    other: str  # admin key of another tenant
    agent: str  # agent key of the owning tenant
    event_id: int
    memory_id: int
    dead_job: int


TURNS = [
    {"role": "user", "content": "Please book a table for four people on Friday evening."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_res_1",
                "type": "function",
                "function": {"name": "reserve_table", "arguments": '{"party": 4, "day": "Fri"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_res_1", "content": '{"status": "ok", "ref": "RZ-551"}'},
    {"role": "assistant", "content": "Booked: reference RZ-551."},
    {"role": "user", "content": "我对花生过敏，请记住。"},
    {"role": "assistant", "content": "好的，已记录。"},
    {"role": "user", "content": "Thanks, that is all."},
    {"role": "assistant", "content": "You're welcome."},
]


async def drain(engine: AsyncEngine, settings: Settings) -> None:
    async with httpx.AsyncClient() as http:
        worker = build_worker(settings, engine, http=http)
        while await worker.run_once() is not None:
            pass


async def seed(client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings) -> Seeded:
    admin = await make_key(engine, "t-a", "admin")
    other = await make_key(engine, "t-b", "admin")
    agent = await make_key(engine, "t-a", "agent")
    app_of(client).state.guard.forget()
    body = {"user_id": "u-a", "messages": TURNS}
    r = await client.post("/v1/sessions/s-a/turns", json=body, headers=bearer(admin))
    assert r.status_code == 201
    r = await client.post(
        "/v1/users/u-a/memories",
        json={"text": "Allergic to peanuts.", "kind": "high_stakes"},
        headers=bearer(admin),
    )
    assert r.status_code == 201
    memory_id = r.json()["id"]
    assert (await client.post("/v1/sessions/s-a/compact", headers=bearer(admin))).status_code == 202
    await drain(engine, settings)
    events = (await client.get("/v1/sessions/s-a/events", headers=bearer(admin))).json()
    async with engine.begin() as conn:
        sid = (await conn.execute(text("SELECT id FROM sessions"))).scalar_one()
        dead = await queue.enqueue(
            conn, tenant_id="t-a", session_id=sid, kind="no_such_kind", max_attempts=1
        )
    assert dead is not None
    assert await Worker(engine=engine, handlers={}, settings=settings).run_once() is not None
    return Seeded(admin, other, agent, events["events"][0]["id"], memory_id, dead)


def routes(s: Seeded) -> list[tuple[str, str]]:
    """Every /ui route, with the owning tenant's ids filled in."""
    return [
        ("GET", "/ui"),
        ("GET", "/ui/sessions"),
        ("GET", "/ui/sessions/s-a"),
        ("GET", f"/ui/sessions/s-a/events/{s.event_id}"),
        ("POST", "/ui/sessions/s-a/compact"),
        ("GET", "/ui/users?user=u-a"),
        ("GET", "/ui/users/u-a"),
        ("POST", f"/ui/users/u-a/memories/{s.memory_id}/pin"),
        ("GET", "/ui/users/u-a/erase"),
        ("POST", "/ui/users/u-a/erase"),
        ("GET", "/ui/queue"),
        ("POST", f"/ui/queue/jobs/{s.dead_job}/requeue"),
        ("GET", "/ui/static/ui.css"),
        ("GET", "/ui/static/ui.js"),
    ]


PUBLIC = {("GET", "/ui/login"), ("POST", "/ui/login"), ("POST", "/ui/logout")}


def login_cookie(key: str) -> dict[str, str]:
    return {"cookie": f"mnemo_ui={key}"}


async def counts(engine: AsyncEngine) -> tuple[int, ...]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("""SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM memories
                        WHERE pinned), (SELECT count(*) FROM jobs WHERE status = 'dead'),
                        (SELECT count(*) FROM jobs WHERE kind = 'compress')""")
            )
        ).one()
    return tuple(row)


def test_the_walk_covers_every_ui_route() -> None:
    from app.main import create_app
    from tests.conftest import make_settings

    app = create_app(make_settings("postgresql://x@localhost/x"), database_url="unused")
    mounted = {
        (method, re.sub(r"\{[^}]+\}", "X", r.path))
        for r in app.routes
        if isinstance(r, APIRoute) and r.path.startswith("/ui")
        for method in r.methods or ()
    }
    seeded = Seeded("", "", "", 1, 1, 1)
    walked = {
        (m, re.sub(r"/(s-a|u-a|1|ui\.css|ui\.js|pin)(?=/|$)", "/X", p.split("?")[0]))
        for m, p in routes(seeded)
    }
    assert mounted - PUBLIC <= walked | {("GET", "/ui/users")}, mounted - PUBLIC - walked


async def test_no_key_wrong_tenant_and_agent_keys_reach_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    s = await seed(client, engine, settings)
    before = await counts(engine)
    for method, path in routes(s):
        form = {"confirm": "u-a"} if path.endswith("/erase") else None
        # No key, a made-up key, a revoked-looking key: the login page, nothing else.
        for headers in ({}, login_cookie("mk_nope_x"), bearer(s.admin)):
            r = await client.request(method, path, headers=headers, data=form)
            assert r.status_code == 401, (method, path, headers)
            assert 'name="key"' in r.text and "s-a" not in r.text and "RZ-551" not in r.text
        # An agent key of the owning tenant: refused.
        r = await client.request(method, path, headers=login_cookie(s.agent), data=form)
        assert r.status_code == 403, (method, path)
        assert "RZ-551" not in r.text and "peanut" not in r.text
        # An admin key of another tenant: the data does not exist for it.
        r = await client.request(method, path, headers=login_cookie(s.other), data=form)
        assert "RZ-551" not in r.text and "peanut" not in r.text.lower(), (method, path)
        if "?user=" in path:  # the search box only redirects to the user's page
            assert r.status_code == 303 and r.headers["location"] == "/ui/users/u-a"
        elif "s-a" in path or "u-a" in path or "/jobs/" in path:
            assert r.status_code in (404, 409), (method, path, r.status_code)
        assert "/ui/sessions/s-a" not in r.text and f"job-{s.dead_job}" not in r.text
    assert await counts(engine) == before  # no action went through


async def test_login_keeps_the_key_in_an_httponly_cookie(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    s = await seed(client, engine, settings)
    r = await client.post("/ui/login", data={"key": s.agent})
    assert r.status_code == 403 and "admin scope" in r.text and "set-cookie" not in r.headers
    r = await client.post("/ui/login", data={"key": "mk_wrong_key"})
    assert r.status_code == 401 and "set-cookie" not in r.headers
    r = await client.post("/ui/login", data={"key": s.admin})
    assert r.status_code == 303 and r.headers["location"] == "/ui/sessions"
    assert s.admin not in r.headers["location"]
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    assert "max-age" not in cookie and "expires" not in cookie  # the browser session only
    page = await client.get("/ui/sessions", headers=login_cookie(s.admin))
    assert page.status_code == 200 and "/ui/sessions/s-a" in page.text
    assert s.admin not in page.text
    # A form posted from another site is refused even with the cookie.
    r = await client.post(
        "/ui/sessions/s-a/compact",
        headers={**login_cookie(s.admin), "origin": "http://evil.example"},
    )
    assert r.status_code == 403


async def test_session_page_shows_pairs_compaction_the_last_diff_and_the_context(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    s = await seed(client, engine, settings)
    me = login_cookie(s.admin)
    page = (await client.get("/ui/sessions/s-a?budget=300", headers=me)).text
    # The tool call and its result sit together, the result under the call.
    call = page.index("reserve_table")
    assert call < page.index("RZ-551", call) < page.index('id="seq-4"')
    assert page.count("compacted by #") >= 3
    assert f"Compression #{s.event_id}" in page
    last = page[page.index('id="last"') : page.index('id="compressions"')]
    assert 'class="badge added"' in last and "manual" in last
    assert "Context at 300 tokens" in page and "max_tokens" not in page
    assert "我对花生过敏" in page
    event = (await client.get(f"/ui/sessions/s-a/events/{s.event_id}", headers=me)).text
    assert "Extracted units" in event and 'class="badge added"' in event


async def test_memories_pin_delete_and_erase_with_confirmation(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    s = await seed(client, engine, settings)
    me = login_cookie(s.admin)
    page = (await client.get("/ui/users/u-a?q=peanut+allergy", headers=me)).text
    assert "Allergic to peanuts." in page and "Best matches" in page
    r = await client.post(f"/ui/users/u-a/memories/{s.memory_id}/pin", headers=me)
    assert r.status_code == 303
    listed = (await client.get("/v1/users/u-a/memories", headers=bearer(s.admin))).json()
    [pinned] = [m for m in listed["memories"] if m["id"] == s.memory_id]
    assert pinned["pinned"] and pinned["expires_at"] is None
    await client.post(f"/ui/users/u-a/memories/{s.memory_id}/unpin", headers=me)
    listed = (await client.get("/v1/users/u-a/memories", headers=bearer(s.admin))).json()
    [unpinned] = [m for m in listed["memories"] if m["id"] == s.memory_id]
    assert not unpinned["pinned"] and unpinned["expires_at"] is not None
    await client.post(f"/ui/users/u-a/memories/{s.memory_id}/delete", headers=me)
    listed = (await client.get("/v1/users/u-a/memories", headers=bearer(s.admin))).json()
    assert s.memory_id not in [m["id"] for m in listed["memories"]]
    r = await client.post("/ui/users/u-a/erase", headers=me, data={"confirm": "u-b"})
    assert r.status_code == 422
    assert (await client.get("/v1/sessions/s-a", headers=bearer(s.admin))).status_code == 200
    r = await client.post("/ui/users/u-a/erase", headers=me, data={"confirm": "u-a"})
    assert r.status_code == 303
    assert (await client.get("/v1/sessions/s-a", headers=bearer(s.admin))).status_code == 404


async def test_queue_page_requeues_a_dead_job_once(
    client: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    s = await seed(client, engine, settings)
    me = login_cookie(s.admin)
    page = (await client.get("/ui/queue", headers=me)).text
    assert f'id="job-{s.dead_job}"' in page and "no handler" in page
    r = await client.post(f"/ui/queue/jobs/{s.dead_job}/requeue", headers=me)
    assert r.status_code == 303
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT status, attempts FROM jobs WHERE id = :id"), {"id": s.dead_job}
            )
        ).one()
    assert (row.status, row.attempts) == ("queued", 0)
    r = await client.post(f"/ui/queue/jobs/{s.dead_job}/requeue", headers=me)
    assert r.status_code == 409  # no longer dead


@pytest.mark.parametrize("sort", ["activity", "turns", "tokens", "compressions", "pending", "x"])
async def test_sessions_search_and_sort(
    client: httpx.AsyncClient, engine: AsyncEngine, sort: str
) -> None:
    for session, user, n in (("alpha-1", "u-x", 3), ("beta_2", "u-y", 1), ("gamma%3", "u-x", 2)):
        msgs = [{"role": "user", "content": f"m{i}"} for i in range(n)]
        r = await client.post(
            f"/v1/sessions/{session.replace('%', '-')}/turns",
            json={"user_id": user, "messages": msgs},
        )
        assert r.status_code == 201
    page = (await client.get(f"/ui/sessions?sort={sort}")).text
    assert all(f"/ui/sessions/{s}" in page for s in ("alpha-1", "beta_2", "gamma-3"))
    if sort == "turns":
        assert page.index("alpha-1") < page.index("gamma-3") < page.index("beta_2")
    found = (await client.get("/ui/sessions?q=u-x")).text
    assert "alpha-1" in found and "gamma-3" in found and "/ui/sessions/beta_2" not in found
    # LIKE wildcards in the search are literal: "_" matches only an underscore.
    found = (await client.get("/ui/sessions?q=a_1")).text  # as a pattern it matches "a-1"
    assert "/ui/sessions/alpha-1" not in found
    found = (await client.get("/ui/sessions?q=ta_")).text
    assert "/ui/sessions/beta_2" in found and "/ui/sessions/alpha-1" not in found

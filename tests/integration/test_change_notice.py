"""The change notice through HTTP: after a compression, the context's task-state block
ends with the compression's change summary as one line, in the session's language,
until the next user turn; a setting turns it off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from tests.conftest import make_settings

EN_TURNS = [
    {"role": "user", "content": "Plan a team offsite for twelve people in Lisbon."},
    {"role": "assistant", "content": "Sure. Any rules I should follow?"},
    {"role": "user", "content": "Keep the venue under 4000 euros, that is a hard limit."},
    {"role": "assistant", "content": "Noted. Shall I reserve the riverside hall?"},
    {"role": "user", "content": "Let me think about the hall first."},
    {"role": "assistant", "content": "Of course, take your time."},
    {"role": "user", "content": "What about catering options?"},
]
ZH_TURNS = [
    {"role": "user", "content": "帮我安排十二个人去杭州的团建活动。"},
    {"role": "assistant", "content": "好的，有什么要求吗？"},
    {"role": "user", "content": "场地费用不能超过四千元，这是硬性要求。"},
    {"role": "assistant", "content": "明白了。要不要预订湖边的会议厅？"},
    {"role": "user", "content": "会议厅的事我再考虑一下。"},
    {"role": "assistant", "content": "好的，您慢慢考虑。"},
    {"role": "user", "content": "餐饮有哪些选择？"},
]


async def with_worker(
    db_url: str, engine: AsyncEngine, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its worker running, over ASGI (the tests of issue 15 share it)."""
    settings = make_settings(db_url, embedded_worker=True, **overrides)
    app = create_app(settings, database_url=db_url, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as c:
            yield c


@pytest.fixture
async def live(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    async for c in with_worker(db_url, engine):
        yield c


@pytest.fixture
async def quiet(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    async for c in with_worker(db_url, engine, change_notice=False):
        yield c


async def _post(client: httpx.AsyncClient, session: str, *messages: dict[str, Any]) -> None:
    r = await client.post(
        f"/v1/sessions/{session}/turns", json={"user_id": "u-1", "messages": list(messages)}
    )
    assert r.status_code == 201, r.text


async def _system(client: httpx.AsyncClient, session: str) -> str:
    r = await client.get(f"/v1/sessions/{session}/context", params={"max_tokens": 2000})
    assert r.status_code == 200, r.text
    messages = r.json()["messages"]
    return str(messages[0]["content"]) if messages[0]["role"] == "system" else ""


async def _compact(client: httpx.AsyncClient, session: str) -> str:
    r = await client.post(f"/v1/sessions/{session}/compact", params={"wait": "true"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "compressed"
    return str(r.json()["change_summary"])


@pytest.mark.parametrize(
    ("turns", "prefix"),
    [(EN_TURNS, "Since the last compression: "), (ZH_TURNS, "自上次压缩以来：")],
    ids=["en", "zh"],
)
async def test_notice_stays_until_the_next_user_turn(
    live: httpx.AsyncClient, turns: list[dict[str, Any]], prefix: str
) -> None:
    await _post(live, "s-n", *turns)
    assert prefix not in await _system(live, "s-n")  # no compression yet, no notice
    summary = await _compact(live, "s-n")
    line = prefix + summary

    system = await _system(live, "s-n")
    assert line in system.splitlines(), system
    # One line, at the end of the task-state block (before any other block).
    state_block = system.split("\n\n")[0]
    assert state_block.splitlines()[-1] == line

    # The agent answering does not retire it; the user speaking does.
    await _post(live, "s-n", {"role": "assistant", "content": turns[1]["content"]})
    assert line in await _system(live, "s-n")
    await _post(live, "s-n", {"role": "user", "content": turns[0]["content"]})
    after = await _system(live, "s-n")
    assert prefix not in after
    assert after.startswith(state_block.splitlines()[0])  # the state itself stays


async def test_a_second_compression_replaces_the_notice(live: httpx.AsyncClient) -> None:
    await _post(live, "s-2", *EN_TURNS)
    first = await _compact(live, "s-2")
    await _post(
        live,
        "s-2",
        {"role": "user", "content": "Also never pick a venue without step-free access."},
        *EN_TURNS[1:5],
    )
    second = await _compact(live, "s-2")
    system = await _system(live, "s-2")
    notices = [x for x in system.splitlines() if x.startswith("Since the last compression: ")]
    assert notices == ["Since the last compression: " + second]
    assert first != second


async def test_the_setting_turns_the_notice_off(quiet: httpx.AsyncClient) -> None:
    await _post(quiet, "s-q", *EN_TURNS)
    await _compact(quiet, "s-q")
    system = await _system(quiet, "s-q")
    assert system  # the state is there
    assert "Since the last compression" not in system

"""Miss → restore → sample, through HTTP: what compression took away comes back into
the state, pinned and naming its turn, when the agent says it needed it or asks the
user for it again; every miss is kept as a sample that `mnemo misses export` prints."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.cli import main
from tests.integration.test_change_notice import with_worker


@pytest.fixture
async def live(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    async for c in with_worker(db_url, engine):
        yield c


EN = [
    {"role": "user", "content": "Please renew my gym membership for another year."},
    {"role": "assistant", "content": "Sure. Which branch are you registered at?"},
    {"role": "user", "content": "The riverside branch. My trainer there is called Marguerite."},
    {"role": "assistant", "content": "Thanks, noted."},
    {"role": "user", "content": "Also I prefer morning classes."},
    {"role": "assistant", "content": "Okay."},
    {"role": "user", "content": "That is all for now."},
    {"role": "assistant", "content": "Great."},
]
ZH = [
    {"role": "user", "content": "帮我续订一年的健身房会员。"},
    {"role": "assistant", "content": "好的，马上为您办理。"},
    {"role": "user", "content": "江边门店，我的教练叫玛格丽特。"},
    {"role": "assistant", "content": "好的，已记下。"},
    {"role": "user", "content": "另外我喜欢上午的课程。"},
    {"role": "assistant", "content": "明白。"},
    {"role": "user", "content": "暂时就这些。"},
    {"role": "assistant", "content": "好的。"},
]


async def _post(client: httpx.AsyncClient, session: str, messages: list[dict[str, Any]]) -> None:
    r = await client.post(
        f"/v1/sessions/{session}/turns", json={"user_id": "u-1", "messages": messages}
    )
    assert r.status_code == 201, r.text


async def _compact(client: httpx.AsyncClient, session: str) -> None:
    r = await client.post(f"/v1/sessions/{session}/compact", params={"wait": "true"})
    assert r.status_code == 200 and r.json()["status"] == "compressed", r.text


async def _system(client: httpx.AsyncClient, session: str) -> str:
    r = await client.get(f"/v1/sessions/{session}/context", params={"max_tokens": 2000})
    assert r.status_code == 200, r.text
    return str(r.json()["messages"][0]["content"])


def _turn_of(messages: list[dict[str, Any]], value: str) -> int:
    return next(i + 1 for i, m in enumerate(messages) if value in (m["content"] or ""))


@pytest.mark.parametrize(
    ("turns", "value", "needed", "mark"),
    [
        (EN, "Marguerite", "the name of my trainer", "(restored from turn {seq})"),
        (ZH, "玛格丽特", "教练叫什么", "（恢复自第 {seq} 轮）"),
    ],
    ids=["en", "zh"],
)
async def test_a_signalled_miss_restores_the_turn_pinned(
    live: httpx.AsyncClient, turns: list[dict[str, Any]], value: str, needed: str, mark: str
) -> None:
    await _post(live, "s-m", turns)
    await _compact(live, "s-m")
    before = (await live.get("/v1/sessions/s-m/state")).json()
    seq = _turn_of(turns, value)
    # Compaction took the turn, and the rules kept nothing of it.
    assert value not in await _system(live, "s-m")
    r = await live.post("/v1/sessions/s-m/misses", json={"needed": needed})
    assert r.status_code == 201, r.text
    body = r.json()
    assert [t["seq"] for t in body["restored"]][:1] == [seq]
    assert body["state_version"] == before["version"] + 1
    system = await _system(live, "s-m")
    line = next(x for x in system.splitlines() if value in x)
    assert mark.format(seq=seq) in line
    # Signalled again: nothing new to restore, the version stays, a second sample is kept.
    again = (await live.post("/v1/sessions/s-m/misses", json={"needed": needed})).json()
    assert again["state_version"] == body["state_version"]
    # Nothing in the archive matches: no restore, but the sample is kept.
    r = await live.post("/v1/sessions/s-m/misses", json={"needed": "the passport expiry date"})
    assert r.status_code == 201 and r.json()["restored"] == []
    metrics = (await live.get("/metrics")).text
    assert 'mnemo_misses_total{detection="explicit",outcome="restored"} 2.0' in metrics
    assert 'mnemo_misses_total{detection="explicit",outcome="not_found"} 1.0' in metrics


async def test_the_agent_asking_again_is_a_miss(live: httpx.AsyncClient) -> None:
    await _post(live, "s-r", EN)
    await _compact(live, "s-r")
    asked = [
        {"role": "assistant", "content": "Before I renew it: what is your trainer called?"},
        {"role": "user", "content": "I told you already."},
        *[{"role": "assistant", "content": "One moment."}] * 3,
    ]
    await _post(live, "s-r", asked)
    await _compact(live, "s-r")
    system = await _system(live, "s-r")
    seq = _turn_of(EN, "Marguerite")
    assert any("Marguerite" in x and f"turn {seq}" in x for x in system.splitlines()), system
    metrics = (await live.get("/metrics")).text
    assert 'mnemo_misses_total{detection="reask",outcome="restored"} 1.0' in metrics


async def test_samples_export_as_jsonl(
    live: httpx.AsyncClient,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await _post(live, "s-x", EN)
    await _compact(live, "s-x")
    r = await live.post("/v1/sessions/s-x/misses", json={"needed": "who is my trainer"})
    assert r.status_code == 201, r.text
    monkeypatch.setenv("MNEMO_DATABASE_URL", db_url)
    assert await asyncio.to_thread(main, ["misses", "export"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    [sample] = lines
    seq = _turn_of(EN, "Marguerite")
    assert sample["session_id"] == "s-x" and sample["detection"] == "explicit"
    assert sample["needed"] == "who is my trainer"
    assert sample["restored_seqs"][:1] == [seq]
    # The compacted turns around it, and the state as it was (without the number).
    assert any("Marguerite" in (t["content"] or "") for t in sample["turns"])
    assert "Marguerite" not in json.dumps(sample["state"])

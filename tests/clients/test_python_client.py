"""The Python client (clients/python) against a real server: sync, async, retries, ids."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, get_type_hints

import httpx
import pytest
from mnemo_client import AsyncClient, Client, MnemoError, types

from tests.clients.conftest import ROOT
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_sync_client_posts_reads_and_remembers(server: Server) -> None:
    session, user = fresh("s"), fresh("u")
    with Client(server.url) as mnemo:
        out = mnemo.post_turns(
            session,
            user,
            [
                {"role": "user", "content": "Book the cheapest flight to Lisbon."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "search", "arguments": '{"to": "LIS"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": '{"flights": 3}'},
            ],
        )
        assert [t["seq"] for t in out["turns"]] == [1, 2, 3]
        assert all(t["id"].startswith("c-") for t in out["turns"])  # ids the client gave
        context = mnemo.get_context(session, max_tokens=1000)
        assert [m["role"] for m in context["messages"]][-3:] == ["user", "assistant", "tool"]
        assert mnemo.get_session(session)["turn_count"] == 3
        page = mnemo.list_turns(session, after_seq=1, limit=1)
        assert [t["seq"] for t in page["turns"]] == [2] and page["next_after_seq"] == 2
        assert mnemo.get_state(session)["version"] >= 0

        memory = mnemo.create_memory(user, "Prefers aisle seats.", kind="preference")
        found = mnemo.list_memories(user, query="aisle seat")["memories"]
        assert [m["id"] for m in found] == [memory["id"]]
        mnemo.delete_memory(user, memory["id"])
        assert mnemo.list_memories(user)["memories"] == []

        mnemo.delete_session(session)
        with pytest.raises(MnemoError) as missing:
            mnemo.get_session(session)
        assert missing.value.status == 404


def test_an_invalid_message_raises_with_the_field_named(server: Server) -> None:
    with Client(server.url) as mnemo, pytest.raises(MnemoError) as invalid:
        mnemo.post_turns(fresh("s"), "u", [{"role": "tool", "content": "x"}])
    assert invalid.value.status == 422
    assert [e["field"] for e in invalid.value.errors] == ["body.messages.0.tool_call_id"]


async def test_async_client_does_the_same(server: Server) -> None:
    session, user = fresh("s"), fresh("u")
    async with AsyncClient(server.url) as mnemo:
        await mnemo.post_turns(session, user, [{"role": "user", "content": "Hello there."}])
        context = await mnemo.get_context(session)
        assert context["messages"][-1]["content"] == "Hello there."
        assert (await mnemo.compact(session, wait=True))["status"] == "nothing_to_compress"
        assert (await mnemo.list_events(session))["events"] == []
        with pytest.raises(MnemoError) as missing:
            await mnemo.get_state(fresh("s"))
        assert missing.value.status == 404


class Flaky(httpx.BaseTransport):
    """Answers the first ``unavailable`` requests with 503, then forwards to the server;
    with ``lose_first_answer``, forwards the first request but loses its answer."""

    def __init__(self, *, unavailable: int = 0, lose_first_answer: bool = False) -> None:
        self.real = httpx.HTTPTransport()
        self.unavailable = unavailable
        self.lose_first_answer = lose_first_answer
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        if len(self.sent) <= self.unavailable:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"status": 503})
        response = self.real.handle_request(request)
        if self.lose_first_answer and len(self.sent) == 1:
            response.read()
            response.close()
            raise httpx.ReadTimeout("answer lost", request=request)
        return response

    def close(self) -> None:
        self.real.close()


def test_retries_503_then_succeeds(server: Server) -> None:
    flaky = Flaky(unavailable=2)
    http = httpx.Client(base_url=server.url, transport=flaky)
    with Client(http=http, max_retries=3) as mnemo:
        out = mnemo.post_turns(fresh("s"), "u", [{"role": "user", "content": "hi"}])
    assert len(flaky.sent) == 3 and out["turns"][0]["duplicate"] is False
    # The same ids in every attempt: the body is built once.
    assert len({r.content for r in flaky.sent}) == 1


def test_gives_up_after_max_retries(server: Server) -> None:
    http = httpx.Client(base_url=server.url, transport=Flaky(unavailable=10))
    with Client(http=http, max_retries=1) as mnemo, pytest.raises(MnemoError) as failed:
        mnemo.get_session("s-1")
    assert failed.value.status == 503


def test_a_post_whose_answer_was_lost_is_retried_without_duplicates(server: Server) -> None:
    session = fresh("s")
    flaky = Flaky(lose_first_answer=True)
    http = httpx.Client(base_url=server.url, transport=flaky)
    with Client(http=http) as mnemo:
        out = mnemo.post_turns(session, "u", [{"role": "user", "content": "only once"}])
        assert out["turns"][0]["duplicate"] is True  # the first attempt had stored it
        assert len(mnemo.list_turns(session)["turns"]) == 1


def test_a_memory_post_is_not_resent_after_a_lost_answer(server: Server) -> None:
    http = httpx.Client(base_url=server.url, transport=Flaky(lose_first_answer=True))
    with Client(http=http) as mnemo, pytest.raises(httpx.ReadTimeout):
        mnemo.create_memory(fresh("u"), "Lives in Porto.")


def test_pop_turn_sync_and_async(server: Server) -> None:
    session = fresh("s")
    with Client(server.url) as mnemo:
        posted = mnemo.post_turns(
            session,
            "u",
            [{"role": "user", "content": "Two seats."}, {"role": "user", "content": "Three."}],
        )
        popped = mnemo.pop_turn(session)
        assert popped["turn"]["id"] == posted["turns"][1]["id"] and popped["turn_count"] == 1
        assert popped["turn"]["content"] == "Three."
        mnemo.pop_turn(session)
        with pytest.raises(MnemoError) as empty:
            mnemo.pop_turn(session)
        assert empty.value.status == 404
        assert empty.value.problem["type"].endswith("/no-turns")


async def test_async_pop_turn(server: Server) -> None:
    session = fresh("s")
    async with AsyncClient(server.url) as mnemo:
        await mnemo.post_turns(session, "u", [{"role": "user", "content": "Hi.", "id": "m-1"}])
        assert (await mnemo.pop_turn(session))["turn"]["id"] == "m-1"
        again = await mnemo.post_turns(
            session, "u", [{"role": "user", "content": "Hi.", "id": "m-1"}]
        )
        assert again["turns"][0]["duplicate"] is False  # popped: stored again


def test_a_pop_is_not_resent_after_a_lost_answer(server: Server) -> None:
    session = fresh("s")
    with Client(server.url) as mnemo:
        mnemo.post_turns(session, "u", [{"role": "user", "content": f"{i}"} for i in range(3)])
    http = httpx.Client(base_url=server.url, transport=Flaky(lose_first_answer=True))
    with Client(http=http) as mnemo, pytest.raises(httpx.ReadTimeout):
        mnemo.pop_turn(session)
    with Client(server.url) as mnemo:
        assert mnemo.get_session(session)["turn_count"] == 2  # popped once, not twice


def schema_fields(spec: dict[str, Any], name: str) -> set[str]:
    return set(spec["components"]["schemas"][name]["properties"])


@pytest.mark.parametrize(
    ("typed", "schema"),
    [
        (types.TurnsOut, "TurnsOut"),
        (types.TurnAck, "TurnAck"),
        (types.Context, "ContextOut"),
        (types.Session, "SessionOut"),
        (types.State, "StateOut"),
        (types.Turn, "TurnOut"),
        (types.TurnsPage, "TurnsPage"),
        (types.PoppedTurn, "PoppedTurnOut"),
        (types.Memory, "MemoryPublic"),
        (types.Memories, "MemoriesOut"),
    ],
)
def test_client_types_match_the_openapi_document(typed: type, schema: str) -> None:
    spec = json.loads((Path(ROOT) / "docs" / "openapi.json").read_text())
    assert set(get_type_hints(typed)) == schema_fields(spec, schema)


def test_the_client_passes_strict_typing_and_lint() -> None:
    package = ROOT / "clients" / "python" / "mnemo_client"
    bin_dir = Path(sys.executable).parent
    for argv in (
        [sys.executable, "-m", "mypy", "--strict", str(package)],
        [str(bin_dir / "ruff"), "check", str(package), str(ROOT / "examples")],
    ):
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

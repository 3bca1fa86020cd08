"""The framework adapters of clients/python against a real `mnemo serve`, each with the
framework's real package: LangChain's chat history, an MCP server seen by an MCP client."""

from __future__ import annotations

import os
import sys
import uuid
from importlib.metadata import version

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mnemo_client import AsyncClient, Client
from mnemo_client.langchain import MnemoChatMessageHistory
from mnemo_client.mcp import build_server

from tests.clients.conftest import ROOT
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_tested_against_the_current_majors() -> None:
    assert version("langchain-core").split(".")[0] == "1"
    assert version("mcp").split(".")[0] == "2"


def exchange() -> list[HumanMessage | AIMessage | ToolMessage]:
    return [
        HumanMessage("Is it raining in Porto?", id="lc-1"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Porto"}, "id": "call_1"}]),
        ToolMessage('{"rain": true}', tool_call_id="call_1"),
        AIMessage("Yes, take an umbrella."),
    ]


def test_langchain_history_adds_to_turns_and_reads_the_context(server: Server) -> None:
    session = fresh("lc")
    with Client(server.url) as mnemo:
        history = MnemoChatMessageHistory(mnemo, session_id=session, user_id="u-lc")
        assert history.messages == []  # nothing posted yet
        history.add_messages(exchange())
        history.add_messages(exchange()[:1])  # same LangChain id: stored once
        turns = mnemo.list_turns(session)["turns"]
        assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"]
        assert turns[0]["id"] == "lc-1"

        read = history.messages
        assert [type(m) for m in read[-4:]] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
        assert read[-3].tool_calls[0]["args"] == {"city": "Porto"}  # type: ignore[attr-defined]
        assert read[-1].content == "Yes, take an umbrella."
        assert all(isinstance(m, SystemMessage) for m in read[:-4])  # the state, if any

        history.clear()
        assert history.messages == []


async def test_langchain_history_async_methods(server: Server) -> None:
    session = fresh("lc")
    with Client(server.url) as mnemo:
        async with AsyncClient(server.url) as amnemo:
            history = MnemoChatMessageHistory(
                mnemo, session_id=session, user_id="u-lc", aclient=amnemo
            )
            await history.aadd_messages([HumanMessage("Hello from async.")])
            assert (await history.aget_messages())[-1].content == "Hello from async."


async def test_mcp_server_remembers_recalls_and_gives_the_context(server: Server) -> None:
    user, session = fresh("u"), fresh("s")
    with Client(server.url) as mnemo:
        mnemo.post_turns(session, user, [{"role": "user", "content": "Plan my trip to Kyoto."}])
    async with (
        AsyncClient(server.url) as amnemo,
        McpClient(build_server(amnemo, user_id=user)) as mcp,
    ):
        names = {tool.name for tool in (await mcp.list_tools()).tools}
        assert names == {"remember", "recall", "get-context"}

        stored = await mcp.call_tool(
            "remember", {"text": "Allergic to peanuts.", "kind": "high_stakes", "pinned": True}
        )
        assert not stored.is_error
        found = await mcp.call_tool("recall", {"query": "peanut allergy"})
        assert found.structured_content == {
            "result": [
                {
                    "id": stored.structured_content["id"],
                    "text": "Allergic to peanuts.",
                    "kind": "high_stakes",
                }
            ]
        }
        nobody = McpClient(build_server(amnemo, user_id=fresh("u")))
        async with nobody:
            empty = await nobody.call_tool("recall", {"query": "anything"})
            assert empty.structured_content == {"result": []}
        context = await mcp.call_tool("get-context", {"session_id": session})
        text = context.content[0].text  # type: ignore[union-attr]
        # The pinned high-stakes memory reaches every context of the user.
        assert "Plan my trip to Kyoto." in text and "Allergic to peanuts." in text


async def test_mcp_server_over_stdio_as_mcp_clients_launch_it(server: Server) -> None:
    user = fresh("u")
    launch = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mnemo_client.mcp"],
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT / "clients" / "python"),
            "MNEMO_URL": server.url,
            "MNEMO_USER_ID": user,
        },
    )
    async with McpClient(launch) as mcp:
        await mcp.call_tool("remember", {"text": "Works night shifts.", "kind": "profile"})
        found = await mcp.call_tool("recall", {"query": "night shift"})
        assert [m["text"] for m in found.structured_content["result"]] == ["Works night shifts."]

"""The OpenAI Agents SDK ``Session`` of clients/python against a real `mnemo serve`, with
the real `openai-agents` package: the SDK's own item types round-trip without a Runner,
``pop_item`` takes items back one at a time, and a real ``Runner.run`` (its model a
scripted OpenAI-compatible server) keeps its history in Mnemo."""

from __future__ import annotations

import json
import uuid
from importlib.metadata import version
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    TResponseInputItem,
    function_tool,
    set_tracing_disabled,
)
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem
from agents.memory import Session
from agents.models.chatcmpl_converter import Converter
from agents.models.fake_id import FAKE_RESPONSES_ID
from mnemo_client import AsyncClient, MnemoError
from mnemo_client.openai_agents import MnemoSession
from openai import AsyncOpenAI
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import TypeAdapter

from tests.e2e.conftest import Server
from tests.examples.test_examples import tool_call_reply
from tests.fakes.openai_server import ok, raw, serve_scripted_llm

pytestmark = pytest.mark.e2e

INPUT_ITEM: TypeAdapter[TResponseInputItem] = TypeAdapter(TResponseInputItem)


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_tested_against_openai_agents_0_24() -> None:
    assert version("openai-agents").split(".")[:2] == ["0", "24"]


def said(text: str, *, id_: str = "msg_1") -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=id_,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def call(call_id: str, city: str) -> ResponseFunctionToolCall:
    arguments = json.dumps({"city": city})
    return ResponseFunctionToolCall(
        type="function_call",
        id=FAKE_RESPONSES_ID,
        call_id=call_id,
        name="weather",
        arguments=arguments,
    )


def a_run_s_items() -> list[TResponseInputItem]:
    """What a run adds to its session: the user's input, then the run's items as the
    SDK turns them into input items (``RunItem.to_input_item``), parallel calls included."""
    agent = Agent(name="forecaster")
    outputs = [
        {"type": "function_call_output", "call_id": "call_1", "output": '{"rain": true}'},
        {"type": "function_call_output", "call_id": "call_2", "output": '{"rain": false}'},
    ]
    run_items = [
        MessageOutputItem(agent=agent, raw_item=said("Let me check both cities.", id_="msg_0")),
        ToolCallItem(agent=agent, raw_item=call("call_1", "Porto")),
        ToolCallItem(agent=agent, raw_item=call("call_2", "Faro")),
        *(ToolCallOutputItem(agent=agent, raw_item=o, output=o["output"]) for o in outputs),  # type: ignore[arg-type]
        MessageOutputItem(agent=agent, raw_item=said("Rain in Porto, sun in Faro.")),
    ]
    first: TResponseInputItem = {"role": "user", "content": "Rain in Porto or Faro today?"}
    return [first, *(item.to_input_item() for item in run_items)]


# What those items are once stored: the same conversation, without response-only fields.
STORED = [
    {"role": "user", "content": "Rain in Porto or Faro today?"},
    {"role": "assistant", "content": "Let me check both cities."},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Porto"}',
    },
    {
        "type": "function_call",
        "call_id": "call_2",
        "name": "weather",
        "arguments": '{"city": "Faro"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": '{"rain": true}'},
    {"type": "function_call_output", "call_id": "call_2", "output": '{"rain": false}'},
    {"role": "assistant", "content": "Rain in Porto, sun in Faro."},
]


async def test_a_mnemo_session_is_an_agents_session(server: Server) -> None:
    async with AsyncClient(server.url) as mnemo:
        assert isinstance(MnemoSession("s", user_id="u", client=mnemo), Session)


async def test_the_sdk_item_types_round_trip_without_a_runner(server: Server) -> None:
    async with AsyncClient(server.url) as mnemo:
        session = MnemoSession(fresh("s"), user_id=fresh("u"), client=mnemo)
        assert await session.get_items() == []  # nothing added yet
        await session.add_items(a_run_s_items())

        items = await session.get_items()
        assert [i for i in items if i.get("role") != "system"] == STORED
        for item in items:
            INPUT_ITEM.validate_python(item)  # each is a valid SDK input item
        # The SDK can send them to a Chat Completions model: calls paired with results.
        messages = Converter.items_to_messages(items)
        roles = [m["role"] for m in messages]
        assert roles[-6:] == ["user", "assistant", "assistant", "tool", "tool", "assistant"]
        assert len(messages[-4]["tool_calls"]) == 2  # type: ignore[typeddict-item]
        assert await session.get_items(limit=2) == STORED[-2:]

        # Mnemo kept the turns (both fake-id calls, not one taken for a resend of the other).
        turns = (await mnemo.list_turns(session.session_id))["turns"]
        assert [t["role"] for t in turns] == [
            "user",
            "assistant",
            "assistant",
            "tool",
            "tool",
            "assistant",
        ]


async def test_pop_item_takes_the_items_back_one_at_a_time(server: Server) -> None:
    async with AsyncClient(server.url) as mnemo:
        session = MnemoSession(fresh("s"), user_id=fresh("u"), client=mnemo)
        assert await session.pop_item() is None  # no session yet
        await session.add_items(a_run_s_items())
        popped = [await session.pop_item() for _ in range(len(STORED))]
        assert popped == list(reversed(STORED))  # the parallel calls too, one at a time
        assert await session.pop_item() is None
        assert await session.get_items() == []

        # A popped item added again is stored again (its message id was freed).
        await session.add_items(a_run_s_items()[:1])
        assert await session.get_items() == STORED[:1]
        again = await session.pop_item()
        await session.add_items([again] if again else [])
        assert await session.get_items() == STORED[:1]


async def test_pop_item_of_a_compacted_turn_raises_409(server: Server) -> None:
    async with AsyncClient(server.url) as mnemo:
        session = MnemoSession(fresh("s"), user_id=fresh("u"), client=mnemo)
        chat = [{"role": ("user", "assistant")[i % 2], "content": f"Step {i}."} for i in range(10)]
        await session.add_items(chat)  # type: ignore[arg-type]
        await mnemo.compact(session.session_id, wait=True)
        live = [
            t for t in (await mnemo.list_turns(session.session_id))["turns"] if not t["compacted"]
        ]
        for _ in live:
            assert await session.pop_item() is not None
        with pytest.raises(MnemoError) as refused:
            await session.pop_item()
        assert refused.value.status == 409
        assert refused.value.problem["type"].endswith("/turn-compacted")


async def test_clear_session_forgets_everything(server: Server) -> None:
    async with AsyncClient(server.url) as mnemo:
        session = MnemoSession(fresh("s"), user_id=fresh("u"), client=mnemo)
        await session.add_items(a_run_s_items())
        await session.clear_session()
        assert await session.get_items() == []
        await session.clear_session()  # twice is fine


async def test_items_mnemo_does_not_store_are_left_out(server: Server) -> None:
    async with AsyncClient(server.url) as mnemo:
        session = MnemoSession(fresh("s"), user_id=fresh("u"), client=mnemo)
        reasoning: Any = {"type": "reasoning", "id": "rs_1", "summary": []}
        await session.add_items([reasoning, {"role": "user", "content": "Hi."}])
        assert await session.get_items() == [{"role": "user", "content": "Hi."}]


async def test_a_runner_keeps_its_history_in_mnemo(server: Server) -> None:
    """Two real ``Runner.run`` calls on one session: the second one's model request
    holds the first run (read from Mnemo's context), tool call and result paired."""

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return json.dumps({"city": city, "rain": city == "Porto"})

    with serve_scripted_llm() as llm:
        llm.script(
            raw(tool_call_reply("call_1", "weather", {"city": "Porto"})),
            ok("Take an umbrella in Porto."),
            ok("You asked about Porto."),
        )
        set_tracing_disabled(True)  # the SDK would export traces to OpenAI
        openai_client = AsyncOpenAI(base_url=llm.base_url, api_key="k")
        model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=openai_client)
        agent = Agent(name="forecaster", model=model, tools=[weather])
        config = RunConfig(tracing_disabled=True)
        async with openai_client, AsyncClient(server.url) as mnemo:
            session = MnemoSession(fresh("s"), user_id=fresh("u"), client=mnemo)
            first = await Runner.run(agent, "Rain in Porto?", session=session, run_config=config)
            assert first.final_output == "Take an umbrella in Porto."
            second = await Runner.run(
                agent, "Which city did I ask about?", session=session, run_config=config
            )
            assert second.final_output == "You asked about Porto."
            turns = (await mnemo.list_turns(session.session_id))["turns"]
        assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"] * 1 + [
            "user",
            "assistant",
        ]
        sent = llm.requests[2]["messages"]
        roles = [m["role"] for m in sent if m["role"] != "system"]
        assert roles == ["user", "assistant", "tool", "assistant", "user"]
        assert sent[-1]["content"] == "Which city did I ask about?"
        assert '"rain": true' in next(m["content"] for m in sent if m["role"] == "tool")

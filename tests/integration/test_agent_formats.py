"""Messages as agents' SDKs produce them (the real `openai` package's types): Chat
Completions dumps, content-part arrays and Responses API items are accepted, stored
once, and come back from /context in Chat Completions form."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageParam
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import TypeAdapter

from tests.conftest import post_turns

CHAT_PARAMS = TypeAdapter(list[ChatCompletionMessageParam])
ARGS = json.dumps({"city": "Lisbon", "day": "Friday"})
RESULT = json.dumps({"flights": 2})

# One exchange, five messages, in the forms the SDKs hand an agent.


def as_sdk_dumps() -> list[dict[str, Any]]:
    """Chat Completions: request params for the input, `model_dump()` of the answers."""
    call = ChatCompletionMessageFunctionToolCall(
        id="call_1", type="function", function=Function(name="search", arguments=ARGS)
    )
    return [
        {"role": "developer", "content": "You book travel."},
        {"role": "user", "content": "Flights to Lisbon on Friday?", "name": "ana"},
        ChatCompletionMessage(role="assistant", content=None, tool_calls=[call]).model_dump(),
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
        ChatCompletionMessage(role="assistant", content="Two flights.").model_dump(),
    ]


def as_content_parts() -> list[dict[str, Any]]:
    def parts(text: str) -> list[dict[str, Any]]:
        return [{"type": "text", "text": text}]

    call = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": ARGS}}
    return [
        {"role": "system", "content": parts("You book travel.")},
        {"role": "user", "content": parts("Flights to Lisbon on Friday?"), "name": "ana"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": parts(RESULT)},
        {"role": "assistant", "content": parts("Two flights.")},
    ]


def as_responses_items() -> list[dict[str, Any]]:
    answer = ResponseOutputMessage(
        id="msg_2",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="Two flights.", annotations=[])],
    )
    call = ResponseFunctionToolCall(
        type="function_call", id="fc_1", call_id="call_1", name="search", arguments=ARGS
    )
    return [
        {"role": "developer", "content": "You book travel."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Flights to Lisbon on Friday?"}],
        },
        call.model_dump(),
        {"type": "function_call_output", "call_id": "call_1", "output": RESULT},
        answer.model_dump(),
    ]


def chat_form(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            m["role"],
            m.get("content"),
            m.get("tool_call_id"),
            [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]]
            if m.get("tool_calls")
            else None,
        )
        for m in messages
    ]


EXPECTED = [
    ("system", "You book travel.", None, None),
    ("user", "Flights to Lisbon on Friday?", None, None),
    ("assistant", None, None, [("call_1", "search", ARGS)]),
    ("tool", RESULT, "call_1", None),
    ("assistant", "Two flights.", None, None),
]


@pytest.mark.parametrize("form", [as_sdk_dumps, as_content_parts, as_responses_items])
async def test_the_same_exchange_in_every_form_reads_back_as_chat_completions(
    client: httpx.AsyncClient, form: Any
) -> None:
    r = await post_turns(client, "s-1", form())
    assert r.status_code == 201, r.text
    assert len(r.json()["turns"]) == 5
    context = (await client.get("/v1/sessions/s-1/context", params={"max_tokens": 4000})).json()
    recent = context["messages"][-5:]
    assert chat_form(recent) == EXPECTED
    CHAT_PARAMS.validate_python(context["messages"])  # what the SDK accepts as input
    turns = (await client.get("/v1/sessions/s-1/turns")).json()["turns"]
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "tool", "assistant"]


async def test_parallel_function_calls_become_one_assistant_message(
    client: httpx.AsyncClient,
) -> None:
    items = [
        {"role": "user", "content": "Weather in Porto and Faro?"},
        *(
            ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{i}",
                call_id=f"call_{i}",
                name="weather",
                arguments=json.dumps({"city": city}),
            ).model_dump()
            for i, city in enumerate(["Porto", "Faro"])
        ),
        {"type": "function_call_output", "call_id": "call_0", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_1", "output": "windy"},
    ]
    first = await post_turns(client, "s-2", items)
    assert first.status_code == 201, first.text
    assert [t["id"] for t in first.json()["turns"]][1] == "fc_0"
    turns = (await client.get("/v1/sessions/s-2/turns")).json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in turns[1]["tool_calls"]] == ["call_0", "call_1"]
    again = await post_turns(client, "s-2", items)  # same item ids: stored once
    assert [t["duplicate"] for t in again.json()["turns"]] == [False, True, False, False]


async def test_the_agents_sdk_placeholder_id_is_not_a_message_id(
    client: httpx.AsyncClient,
) -> None:
    """Items the Agents SDK converts from Chat Completions all carry one placeholder id."""
    placeholder = "__fake_id__"
    calls = [
        ResponseFunctionToolCall(
            type="function_call", id=placeholder, call_id="call_a", name="lookup", arguments="{}"
        ).model_dump(),
        {"type": "function_call_output", "call_id": "call_a", "output": "ok", "id": placeholder},
    ]
    answer = ResponseOutputMessage(
        id=placeholder,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="Done.", annotations=[])],
    ).model_dump()
    r = await post_turns(client, "s-fake", [*calls, answer])
    assert r.status_code == 201, r.text
    acks = r.json()["turns"]
    assert [t["duplicate"] for t in acks] == [False, False, False]
    assert placeholder not in {t["id"] for t in acks}
    again = await post_turns(client, "s-fake", [answer])  # a new answer, not a resend
    assert again.json()["turns"][0]["duplicate"] is False
    turns = (await client.get("/v1/sessions/s-fake/turns")).json()["turns"]
    assert [t["role"] for t in turns] == ["assistant", "tool", "assistant", "assistant"]


async def test_other_parts_are_typed_placeholders_and_inline_data_is_not_kept(
    client: httpx.AsyncClient,
) -> None:
    inline = "data:image/png;base64," + "A" * 4000
    content = [
        {"type": "text", "text": "What is on these?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": inline}},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-9", "filename": "plan.pdf"}},
        {"type": "text", "text": "Thanks."},
    ]
    r = await post_turns(client, "s-3", [{"role": "user", "content": content}])
    assert r.status_code == 201, r.text
    (turn,) = (await client.get("/v1/sessions/s-3/turns")).json()["turns"]
    lines = turn["content"].split("\n")
    assert lines[0] == "What is on these?" and lines[-1] == "Thanks."
    assert lines[1] == "[image: https://example.com/a.png (detail: low)]"
    assert lines[2].startswith("[image: inline image/png") and "AAAA" not in lines[2]
    assert lines[3:5] == ["[audio: wav]", "[file: plan.pdf]"]


async def test_a_refusal_stands_in_for_null_content(client: httpx.AsyncClient) -> None:
    refused = ChatCompletionMessage(role="assistant", content=None, refusal="I can't help.")
    r = await post_turns(client, "s-4", [refused.model_dump()])
    assert r.status_code == 201, r.text
    (turn,) = (await client.get("/v1/sessions/s-4/turns")).json()["turns"]
    assert turn["content"] == "I can't help."


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"type": "reasoning", "summary": []}, "body.messages.0"),
        (
            {"role": "user", "content": [{"type": "video", "url": "x"}]},
            "body.messages.0.content.0",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": "x", "mood": "ok"}]},
            "body.messages.0.content.0.text.mood",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "f", "arguments": "{}"},
            },
            "body.messages.0.function_call",
        ),
        ({"role": "user", "content": "x", "mood": "ok"}, "body.messages.0.mood"),
        (
            {"type": "function_call", "name": "f", "arguments": "{}"},
            "body.messages.0.function_call.call_id",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": "x", "extra": 1},
            "body.messages.0.function_call_output.extra",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": None},
            "body.messages.0.function_call_output.output",
        ),
        (
            {"type": "message", "role": "user", "content": [{"type": "input_text"}]},
            "body.messages.0.message.content.0.input_text.text",
        ),
    ],
)
async def test_anything_else_is_a_422_naming_the_field(
    client: httpx.AsyncClient, message: dict[str, Any], field: str
) -> None:
    r = await post_turns(client, "s-5", [message])
    assert r.status_code == 422, r.text
    assert field in [e["field"] for e in r.json()["errors"]], r.json()["errors"]
    assert (await client.get("/v1/sessions/s-5")).status_code == 404  # nothing stored


async def test_errors_after_grouped_calls_name_the_posted_position(
    client: httpx.AsyncClient,
) -> None:
    calls = [{"type": "function_call", "call_id": c, "name": "f", "arguments": "{}"} for c in "ab"]
    r = await post_turns(client, "s-6", [*calls, {"role": "tool", "content": "done"}])
    assert r.status_code == 422
    assert [e["field"] for e in r.json()["errors"]] == ["body.messages.2.tool_call_id"]

"""The example agent loops (examples/) as a user runs them: against a real `mnemo serve`
and a scripted OpenAI-compatible server (tests/fakes/openai_server.py)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clients.conftest import NODE, ROOT, build_typescript, needs_node, run
from tests.e2e.conftest import Server
from tests.fakes.openai_server import ScriptedLLM, ok, raw, serve_scripted_llm

pytestmark = pytest.mark.e2e

ANSWER = "TP1351 leaves on Friday for 89 EUR."


def tool_call_reply(call_id: str, name: str, arguments: dict[str, Any]) -> str:
    """A Chat Completions answer that asks for one tool call, as OpenAI sends it."""
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return json.dumps(
        {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        }
    )


def script_flight_search(llm: ScriptedLLM) -> None:
    llm.script(
        raw(tool_call_reply("call_1", "search_flights", {"to": "Lisbon", "day": "Friday"})),
        ok(ANSWER),
    )


def assert_the_loop_went_through_mnemo(llm: ScriptedLLM, server: Server, session: str) -> None:
    first, second = llm.requests
    assert first["messages"][-1] == {"role": "user", "content": "Find me a flight to Lisbon."}
    assert first["tools"][0]["function"]["name"] == "search_flights"
    # The second call's context holds the tool call and its result, paired.
    roles = [(m["role"], m.get("tool_call_id")) for m in second["messages"]]
    assert roles[-3:] == [("user", None), ("assistant", None), ("tool", "call_1")]
    assert json.loads(second["messages"][-1]["content"])["flights"][0]["number"] == "TP1351"
    turns = httpx.get(f"{server.url}/v1/sessions/{session}/turns").json()["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"]
    assert turns[-1]["content"] == ANSWER


def example_env(server: Server, llm: ScriptedLLM, session: str) -> dict[str, str]:
    """What a user sets to run an example: where Mnemo and the model are."""
    env = {k: v for k, v in os.environ.items() if k != "MNEMO_API_KEY"}
    env.update(
        MNEMO_URL=server.url,
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="sk-scripted",
        SESSION_ID=session,
        PYTHONPATH=str(ROOT / "clients" / "python"),
    )
    return env


def test_python_agent_loop(server: Server) -> None:
    session = f"py-{uuid.uuid4().hex[:8]}"
    with serve_scripted_llm() as llm:
        script_flight_search(llm)
        agent = ROOT / "examples" / "python" / "agent.py"
        argv = [sys.executable, str(agent), "Find me a flight to Lisbon."]
        out = run(argv, ROOT, example_env(server, llm, session))
        assert out.strip() == ANSWER
        assert_the_loop_went_through_mnemo(llm, server, session)


@needs_node
def test_typescript_agent_loop(server: Server, tmp_path: Path) -> None:
    repo = tmp_path / "repo"  # the example depends on ../../clients/typescript
    build_typescript(ROOT / "clients" / "typescript", repo / "clients" / "typescript")
    example = build_typescript(ROOT / "examples" / "typescript", repo / "examples" / "typescript")
    session = f"ts-{uuid.uuid4().hex[:8]}"
    with serve_scripted_llm() as llm:
        script_flight_search(llm)
        env = example_env(server, llm, session)
        out = run([str(NODE), "dist/agent.js", "Find me a flight to Lisbon."], example, env)
        assert out.strip() == ANSWER
        assert_the_loop_went_through_mnemo(llm, server, session)

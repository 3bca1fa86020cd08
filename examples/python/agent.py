"""An agent loop with Mnemo as its memory: post every turn, ask for the context
before each model call, run the tool the model asks for, post its result.

    pip install openai ./clients/python
    MNEMO_URL=http://127.0.0.1:8000 OPENAI_BASE_URL=… OPENAI_API_KEY=… \
        python examples/python/agent.py "Book me a flight to Lisbon on Friday."

Any OpenAI-compatible server works (OPENAI_BASE_URL); CI runs this file against a
scripted local one (tests/examples/test_examples.py).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

from mnemo_client import Client
from openai import OpenAI

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Flights to a city on a day.",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "day": {"type": "string"}},
                "required": ["to", "day"],
            },
        },
    }
]


def search_flights(to: str, day: str) -> dict[str, Any]:
    """The tool: a stand-in for a real flight search."""
    return {"flights": [{"number": "TP1351", "to": to, "day": day, "price_eur": 89}]}


def run(task: str, *, session_id: str, user_id: str, max_steps: int = 5) -> str:
    llm = OpenAI()  # OPENAI_BASE_URL, OPENAI_API_KEY from the environment
    with Client(
        os.environ.get("MNEMO_URL", "http://127.0.0.1:8000"), os.environ.get("MNEMO_API_KEY")
    ) as mnemo:
        mnemo.post_turns(session_id, user_id, [{"role": "user", "content": task}])
        for _ in range(max_steps):
            # The context replaces the history: task state, memories, recent turns.
            context = mnemo.get_context(session_id, max_tokens=2000)
            reply = llm.chat.completions.create(
                model=MODEL, messages=context["messages"], tools=TOOLS
            )
            message = reply.choices[0].message
            # Post what the SDK returned, as it returned it.
            mnemo.post_turns(session_id, user_id, [message.model_dump()])
            if not message.tool_calls:
                return message.content or ""
            results = []
            for call in message.tool_calls:
                output = search_flights(**json.loads(call.function.arguments))
                results.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(output)}
                )
            mnemo.post_turns(session_id, user_id, results)
    raise RuntimeError(f"no answer after {max_steps} steps")


if __name__ == "__main__":
    task = sys.argv[1] if len(sys.argv) > 1 else "Find me a flight to Lisbon on Friday."
    session = os.environ.get("SESSION_ID", f"example-{uuid.uuid4().hex[:8]}")
    print(run(task, session_id=session, user_id=os.environ.get("USER_ID", "example-user")))

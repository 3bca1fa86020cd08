"""The LLM extractor against a real local OpenAI-compatible server with scripted replies."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import httpx
import pytest

from app.compression.extract.fallback import ExtractionResult, extract_with_fallback
from app.compression.extract.llm import LLMExtractor
from app.compression.extract.rules import RuleExtractor
from app.compression.state import ConstraintUnit, Goal, TaskState, Unit, units_json_schema
from app.core.llm import LLMBadResponse, LLMUnavailable
from app.core.turns import TurnView
from app.providers.llm import ChatClient
from tests.fakes.openai_server import (
    Reply,
    ScriptedLLM,
    http_error,
    malformed,
    ok,
    raw,
    serve_scripted_llm,
    slow,
    units,
)

MODEL = "test-model"
BIG_RESULT = json.dumps({"ref": "TBL-881", "rows": ["x" * 40] * 60, "tail": "END-OF-RESULT"})
TURNS = [
    TurnView(1, "user", "Book a table for 4 at 7pm. No shellfish, I'm allergic."),
    TurnView(
        2,
        "assistant",
        None,
        tool_calls=[
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "book_table", "arguments": '{"people": 4, "time": "19:00"}'},
            }
        ],
    ),
    TurnView(3, "tool", BIG_RESULT, tool_call_id="c1"),
    TurnView(4, "assistant", "Booked, ref TBL-881. 要我把确认发到邮箱吗？"),
]
STATE = TaskState(goal=Goal(key="goal:dinner", text="Plan the team dinner"))
CONSTRAINT = {"kind": "constraint", "text": "No shellfish", "source_seqs": [1]}
ACTION = {
    "kind": "action",
    "tool": "book_table",
    "arguments": {"people": 4, "time": "19:00"},
    "status": "done",
    "result_summary": "booked TBL-881",
    "result_type": "object",
    "ref_paths": ["$.ref"],
    "call_id": "c1",
    "source_seqs": [2, 3],
}
GOOD = units(CONSTRAINT, ACTION)


class StubRules:
    """Stands in for the rule extractor: deterministic, and counts its calls."""

    name = "rules"

    def __init__(self) -> None:
        self.calls = 0

    async def extract(self, turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
        self.calls += 1
        return [ConstraintUnit(text="from rules", source_seqs=[turns[0].seq])]


@pytest.fixture(scope="module")
def llm_server() -> Iterator[ScriptedLLM]:
    # One server for the module (starting and stopping uvicorn costs ~0.2 s).
    with serve_scripted_llm() as server:
        yield server


@pytest.fixture
def llm(llm_server: ScriptedLLM) -> ScriptedLLM:
    llm_server.reset()
    return llm_server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def make_client(http: httpx.AsyncClient, base_url: str, *, timeout_s: float = 5.0) -> ChatClient:
    return ChatClient(http, base_url=base_url, api_key="sk-test", model=MODEL, timeout_s=timeout_s)


def make_extractor(
    http: httpx.AsyncClient, llm: ScriptedLLM, *, timeout_s: float = 5.0, max_retries: int = 2
) -> LLMExtractor:
    client = make_client(http, llm.base_url, timeout_s=timeout_s)
    return LLMExtractor(client, max_retries=max_retries, backoff_s=0.01)


async def run(extractor: LLMExtractor | None, rules: StubRules) -> ExtractionResult:
    return await extract_with_fallback(extractor, rules, TURNS, STATE)


def last_user(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"])


# --------------------------------------------------------------------------- success


async def test_good_reply_gives_units(http: httpx.AsyncClient, llm: ScriptedLLM) -> None:
    llm.script(GOOD)
    extractor, rules = make_extractor(http, llm), StubRules()

    result = await run(extractor, rules)

    assert result.extractor == "llm:test-model"
    assert result.fallback_reason is None
    assert result.attempts == 1
    assert [u.kind for u in result.units] == ["constraint", "action"]
    assert result.units[0] == ConstraintUnit(text="No shellfish", source_seqs=[1])
    action = result.units[1]
    assert action.kind == "action" and action.call_id == "c1" and action.ref_paths == ["$.ref"]
    assert rules.calls == 0
    assert len(llm.requests) == 1
    stats = extractor._client.stats
    assert (stats.calls, stats.errors) == (1, 0) and stats.total_ms > 0


async def test_request_carries_model_format_schema_state_and_turns(
    http: httpx.AsyncClient, llm: ScriptedLLM
) -> None:
    llm.script(GOOD)
    await run(make_extractor(http, llm), StubRules())

    [request] = llm.requests
    assert request["model"] == MODEL
    assert request["temperature"] == 0
    assert request["response_format"] == {"type": "json_object"}
    assert llm.headers[0]["authorization"] == "Bearer sk-test"
    system = request["messages"][0]
    assert system["role"] == "system"
    schema = json.dumps(units_json_schema(), ensure_ascii=False, separators=(",", ":"))
    assert schema in system["content"]
    # Few-shot pairs sit between the instruction and the request, in both languages.
    roles = [m["role"] for m in request["messages"]]
    assert roles[1:-1] == ["user", "assistant"] * ((len(roles) - 2) // 2) and len(roles) >= 6
    examples = " ".join(m["content"] for m in request["messages"][1:-1])
    assert "previous" in examples and "学习率" in examples and '{"units": []}' in examples

    prompt = last_user(request)
    assert "goal: Plan the team dinner" in prompt
    assert "[seq 1] user: Book a table for 4 at 7pm. No shellfish, I'm allergic." in prompt
    assert '-> call c1 book_table({"people": 4, "time": "19:00"})' in prompt
    assert "[seq 3] tool result of c1 book_table: " in prompt
    assert "[seq 4] assistant: Booked, ref TBL-881. 要我把确认发到邮箱吗？" in prompt
    # The 2.5 kB tool result is cut at 1,500 characters.
    assert BIG_RESULT[:1500] in prompt
    assert "END-OF-RESULT" not in prompt
    assert f"[{len(BIG_RESULT) - 1500} more chars]" in prompt


async def test_json_schema_mode_sends_the_schema(http: httpx.AsyncClient, llm: ScriptedLLM) -> None:
    llm.script(ok({"units": []}))
    client = ChatClient(
        http,
        base_url=llm.base_url,
        api_key=None,
        model=MODEL,
        timeout_s=5,
        response_format="json_schema",
    )
    await client.complete_json([{"role": "user", "content": "hi"}], schema={"type": "object"})

    [request] = llm.requests
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert "authorization" not in llm.headers[0]


async def test_no_primary_uses_rules(llm: ScriptedLLM) -> None:
    rules = StubRules()
    result = await run(None, rules)
    assert (result.extractor, result.fallback_reason, result.attempts) == ("rules", None, 0)
    assert rules.calls == 1 and llm.requests == []


# --------------------------------------------------------------------------- invalid output


async def test_malformed_then_good_succeeds_on_retry(
    http: httpx.AsyncClient, llm: ScriptedLLM
) -> None:
    bad = malformed()
    llm.script(bad, GOOD)
    rules = StubRules()

    result = await run(make_extractor(http, llm), rules)

    assert result.extractor == "llm:test-model"
    assert result.attempts == 2
    assert [u.kind for u in result.units] == ["constraint", "action"]
    assert rules.calls == 0
    first, second = llm.requests
    # The retry shows the model its reply and why it was refused.
    assert second["messages"][: len(first["messages"])] == first["messages"]
    echo, correction = second["messages"][-2:]
    assert echo == {"role": "assistant", "content": bad.content}
    assert correction["role"] == "user"
    assert "previous reply was invalid because" in correction["content"]
    assert "not valid JSON" in correction["content"]


async def test_always_malformed_falls_back_to_rules(
    http: httpx.AsyncClient, llm: ScriptedLLM
) -> None:
    llm.script(malformed(), malformed(), malformed())
    rules = StubRules()

    result = await run(make_extractor(http, llm), rules)

    assert result.extractor == "rules"
    assert result.units == [ConstraintUnit(text="from rules", source_seqs=[1])]
    assert result.fallback_reason is not None
    assert result.fallback_reason.startswith("llm: invalid output (")
    assert result.fallback_reason.endswith("after 3 attempts")
    assert result.attempts == 3
    assert len(llm.requests) == 3 and llm.exhausted == 0
    assert rules.calls == 1
    # Only the latest correction is carried: the prompt does not grow per retry.
    assert len(llm.requests[2]["messages"]) == len(llm.requests[1]["messages"])


async def test_fallback_runs_the_real_rule_extractor(
    http: httpx.AsyncClient, llm: ScriptedLLM
) -> None:
    llm.script(http_error(500), malformed(), http_error(429))
    rules = RuleExtractor()

    result = await extract_with_fallback(make_extractor(http, llm), rules, TURNS, STATE)

    assert result.extractor == "rules"
    assert result.fallback_reason == "llm: http 429 after 3 attempts"
    assert result.units == await rules.extract(TURNS, STATE)
    assert any(u.kind == "action" and u.tool == "book_table" for u in result.units)


@pytest.mark.parametrize(
    ("bad_unit", "why"),
    [
        ({"kind": "wish", "text": "x", "source_seqs": [1]}, "does not match any of the expected"),
        ({**CONSTRAINT, "source_seqs": [99]}, "source_seqs [99] are not seqs of the given turns"),
        ({**CONSTRAINT, "text": "   "}, "text is blank"),
        ({**CONSTRAINT, "emphasized": "yes"}, "units.0.constraint.emphasized"),
        ({**CONSTRAINT, "confidence": 0.9}, "Extra inputs are not permitted"),
        ({**CONSTRAINT, "source_seqs": []}, "units.0.constraint.source_seqs"),
    ],
    ids=["unknown-kind", "invented-seq", "blank-text", "string-bool", "extra-field", "no-seqs"],
)
async def test_schema_invalid_reply_is_refused_and_corrected(
    http: httpx.AsyncClient, llm: ScriptedLLM, bad_unit: dict[str, Any], why: str
) -> None:
    llm.script(units(bad_unit), GOOD)

    result = await run(make_extractor(http, llm), StubRules())

    assert result.attempts == 2 and result.extractor == "llm:test-model"
    assert why in last_user(llm.requests[1])


async def test_invented_seq_is_never_accepted(http: httpx.AsyncClient, llm: ScriptedLLM) -> None:
    # Enough bad units that the reason is clipped: the attempt count must survive it.
    invented = units(
        {**ACTION, "source_seqs": [2, 3, 57]}, *[{**CONSTRAINT, "source_seqs": [8]}] * 9
    )
    llm.script(invented, invented, invented)

    result = await run(make_extractor(http, llm), StubRules())

    assert result.extractor == "rules"
    assert result.fallback_reason is not None
    assert "source_seqs [57] are not seqs of the given turns (1..4)" in result.fallback_reason
    assert result.fallback_reason.endswith(" after 3 attempts")
    assert len(llm.requests) == 3


# --------------------------------------------------------------------------- unavailable


async def test_timeout_falls_back_after_bounded_attempts(
    http: httpx.AsyncClient, llm: ScriptedLLM
) -> None:
    llm.script(slow(3), slow(3), slow(3))
    extractor = make_extractor(http, llm, timeout_s=0.3, max_retries=2)
    started = time.monotonic()

    result = await run(extractor, StubRules())

    elapsed = time.monotonic() - started
    assert result.extractor == "rules"
    assert result.fallback_reason == "llm: timeout (0.3s) after 3 attempts"
    assert len(llm.requests) == 1 + 2
    assert 0.9 <= elapsed < 2.0  # three 0.3 s deadlines, not three 3 s replies
    assert extractor._client.stats.errors == 3


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_server_errors_retry_then_fall_back(
    http: httpx.AsyncClient, llm: ScriptedLLM, status: int
) -> None:
    llm.script(*[http_error(status)] * 3)

    result = await run(make_extractor(http, llm), StubRules())

    assert result.extractor == "rules"
    assert result.fallback_reason == f"llm: http {status} after 3 attempts"
    assert len(llm.requests) == 3 and llm.exhausted == 0


@pytest.mark.parametrize("status", [500, 429])
async def test_server_error_then_good_succeeds(
    http: httpx.AsyncClient, llm: ScriptedLLM, status: int
) -> None:
    llm.script(http_error(status, retry_after=0), GOOD)

    result = await run(make_extractor(http, llm), StubRules())

    assert (result.extractor, result.attempts) == ("llm:test-model", 2)
    # A transport retry resends the same prompt; there is nothing to correct.
    first, second = llm.requests
    assert first["messages"] == second["messages"]


async def test_no_retries_means_one_request(http: httpx.AsyncClient, llm: ScriptedLLM) -> None:
    llm.script(http_error(500), GOOD)

    result = await run(make_extractor(http, llm, max_retries=0), StubRules())

    assert result.fallback_reason == "llm: http 500 after 1 attempts"
    assert len(llm.requests) == 1 and llm.pending == 1


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (http_error(400), "llm: http 400: "),
        (http_error(401), "llm: http 401: "),
        (raw("<html>bad gateway</html>"), "llm: response body is not JSON"),
        (raw('{"choices": []}'), "llm: response has no choices[0].message.content"),
        (Reply(content=None), "llm: choices[0].message.content is not a string"),
    ],
    ids=["400", "401", "html", "no-choices", "null-content"],
)
async def test_bad_responses_are_not_retried(
    http: httpx.AsyncClient, llm: ScriptedLLM, reply: Reply, reason: str
) -> None:
    llm.script(reply, GOOD)

    result = await run(make_extractor(http, llm), StubRules())

    assert result.extractor == "rules"
    assert result.fallback_reason is not None and result.fallback_reason.startswith(reason)
    assert result.attempts == 1
    assert len(llm.requests) == 1


async def test_unreachable_server_falls_back(http: httpx.AsyncClient) -> None:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = make_client(http, f"http://127.0.0.1:{port}/v1")
    extractor = LLMExtractor(client, max_retries=1, backoff_s=0.01)

    result = await run(extractor, StubRules())

    assert result.extractor == "rules"
    assert result.fallback_reason == "llm: connect error: ConnectError after 2 attempts"
    assert client.stats.calls == 2 and client.stats.errors == 2


# --------------------------------------------------------------------------- client errors


async def test_client_translates_errors(http: httpx.AsyncClient, llm: ScriptedLLM) -> None:
    client = make_client(http, llm.base_url + "/", timeout_s=0.2)  # trailing slash tolerated
    messages = [{"role": "user", "content": "hi"}]
    llm.script(ok("plain"), http_error(429, retry_after=7), http_error(404), slow(2))

    assert await client.complete_json(messages, schema=None) == "plain"
    with pytest.raises(LLMUnavailable) as unavailable:
        await client.complete_json(messages, schema=None)
    assert unavailable.value.retry_after_s == 7
    with pytest.raises(LLMBadResponse, match="http 404"):
        await client.complete_json(messages, schema=None)
    with pytest.raises(LLMUnavailable, match="timeout"):
        await client.complete_json(messages, schema=None)
    assert (client.stats.calls, client.stats.errors) == (4, 3)

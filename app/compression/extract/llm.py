"""The LLM extractor: asks an OpenAI-compatible model for ``{"units": [...]}``.

The prompt carries the unit JSON schema, a few worked examples (English and
Chinese), the current state in brief (so the model reports changes, not repeats)
and the turns with their seqs. The reply is validated twice: structurally by
``parse_units`` and semantically (every ``source_seqs`` is a seq of the given
turns, texts are not blank). An invalid reply is sent back to the model with
the reason; an unavailable model is retried with backoff. When both run out,
``ExtractionFailed`` is raised: the caller falls back to the rules rather than
mistaking an outage for "nothing to extract".

Prompt building and reply validation are pure functions; only
``LLMExtractor`` does I/O, through the chat client it is given (``core/llm.Chat``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Sequence
from typing import Any

from pydantic import ValidationError

from app.compression.extract.fallback import ExtractionFailed
from app.compression.state import Goal, Parameter, TaskState, Unit, parse_units, units_json_schema
from app.compression.text import clip, item_key, param_key
from app.compression.untrusted import one_line
from app.core.limits import NAME_CHARS
from app.core.llm import Chat, LLMBadResponse, LLMUnavailable
from app.core.retry import GiveUp, decide_retry
from app.core.turns import TurnView

TOOL_RESULT_CHARS = 1500
MESSAGE_CHARS = 4000
_ARGUMENT_CHARS = 500
_STATE_ITEMS = 8
_STATE_ITEM_CHARS = 160
_ECHO_CHARS = 2000  # how much of an invalid reply is shown back to the model
_MAX_PROBLEMS = 8
_REASON_CHARS = 300
# Fields that carry the meaning of a unit; whitespace-only is as good as missing.
_TEXT_FIELDS = ("text", "answer", "value", "name", "tool")


class InvalidReply(ValueError):
    """The model's reply is not a valid unit batch for these turns; str is the why."""


# --------------------------------------------------------------------------- prompt

_SYSTEM = """\
You extract the task state from an excerpt of a conversation between a user, an AI \
agent and the agent's tools.

Reply with ONLY a JSON object {{"units": [...]}} that validates against the JSON schema \
below: no prose, no markdown, no code fences.

Rules:
- One unit per distinct item. Kinds: goal, constraint, action (a tool call and its \
result), parameter, artifact (ids, booking refs, paths, urls, emails produced), \
decision, todo, pending (a question or confirmation awaiting the user), resolution \
(the user's answer to a pending item), revocation (the user cancels a constraint or \
todo), preference, high_stakes (allergy, medical, payment, account, identity), \
blocker, fact, summary.
- source_seqs lists the seq numbers of the turns a unit comes from. Use only seqs \
shown under "Turns"; never cite the current state, never invent a seq.
- Report what the turns add or change. Do not repeat state items the turns do not \
mention. A changed parameter gives the replaced value in "previous".
- Actions: status from the tool result (done, failed, unknown); result_type is the \
JSON type of the result; ref_paths are JSONPaths of notable fields (e.g. $.pnr); \
summarise the result in one line, never copy it.
- Keep texts short, in the language of the conversation. State only what the turns say.
- Set emphasized to true only for turns marked (emphasized).
- Add one summary unit (1-3 short sentences, in the language of the conversation) \
for what was discussed, explained or reasoned about that fits no other unit; omit it \
when everything fits a unit.
- Small talk, thanks and greetings produce {{"units": []}}.

JSON schema:
{schema}"""


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


# (turns, state, expected reply). Built from real TurnViews and rendered by the
# same functions as the live request, so the examples cannot drift from it;
# tests check every reply validates.
_EXAMPLES: list[tuple[list[TurnView], TaskState, dict[str, Any]]] = [
    (
        [
            TurnView(10, "user", "Book me a flight to Tokyo on May 3. Economy only, no red-eyes."),
            TurnView(
                11,
                "assistant",
                None,
                tool_calls=[
                    _call(
                        "call_a1",
                        "search_flights",
                        {"to": "HND", "date": "2025-05-03", "cabin": "economy"},
                    )
                ],
            ),
            TurnView(
                12,
                "tool",
                '{"flights": [{"id": "JL5", "dep": "10:05", "price": 612}, '
                '{"id": "NH9", "dep": "11:30", "price": 655}], "count": 2}',
                tool_call_id="call_a1",
            ),
            TurnView(13, "assistant", "I found JL5 (10:05, $612) and NH9 (11:30, $655). Book JL5?"),
        ],
        TaskState(),
        {
            "units": [
                {"kind": "goal", "text": "Book a flight to Tokyo on May 3", "source_seqs": [10]},
                {"kind": "constraint", "text": "Economy class only", "source_seqs": [10]},
                {"kind": "constraint", "text": "No red-eye flights", "source_seqs": [10]},
                {
                    "kind": "action",
                    "tool": "search_flights",
                    "arguments": {"to": "HND", "date": "2025-05-03", "cabin": "economy"},
                    "status": "done",
                    "result_summary": "2 flights: JL5 10:05 $612, NH9 11:30 $655",
                    "result_type": "object",
                    "ref_paths": ["$.flights", "$.count"],
                    "result_keys": ["flights", "count"],
                    "call_id": "call_a1",
                    "source_seqs": [11, 12],
                },
                {
                    "kind": "pending",
                    "text": "Confirm booking JL5 (10:05, $612)",
                    "source_seqs": [13],
                },
            ]
        },
    ),
    (
        [
            TurnView(40, "user", "学习率别用 0.01 了，改成 0.001。另外训练别超过 5 个 epoch。"),
            TurnView(
                41,
                "assistant",
                None,
                tool_calls=[_call("call_t7", "start_training", {"lr": 0.001, "max_epochs": 5})],
            ),
            TurnView(
                42,
                "tool",
                '{"run_id": "run-7781", "status": "started", "log": "/runs/7781/train.log"}',
                tool_call_id="call_t7",
            ),
            TurnView(43, "assistant", "训练已启动（run-7781），学习率 0.001，最多 5 个 epoch。"),
        ],
        TaskState(
            goal=Goal(key=item_key("goal", "微调情感分类模型"), text="微调情感分类模型"),
            parameters=[
                Parameter(
                    key=param_key("learning_rate"),
                    name="learning_rate",
                    value="0.01",
                    source_seq=31,
                )
            ],
        ),
        {
            "units": [
                {
                    "kind": "parameter",
                    "name": "learning_rate",
                    "value": "0.001",
                    "previous": "0.01",
                    "source_seqs": [40],
                },
                {"kind": "constraint", "text": "训练不超过 5 个 epoch", "source_seqs": [40]},
                {
                    "kind": "action",
                    "tool": "start_training",
                    "arguments": {"lr": 0.001, "max_epochs": 5},
                    "status": "done",
                    "result_summary": "训练已启动 run-7781",
                    "result_type": "object",
                    "ref_paths": ["$.run_id", "$.log"],
                    "result_keys": ["run_id", "status", "log"],
                    "call_id": "call_t7",
                    "source_seqs": [41, 42],
                },
                {
                    "kind": "artifact",
                    "artifact_kind": "id",
                    "value": "run-7781",
                    "label": "run_id",
                    "source_seqs": [42],
                },
                {
                    "kind": "artifact",
                    "artifact_kind": "path",
                    "value": "/runs/7781/train.log",
                    "label": "log",
                    "source_seqs": [42],
                },
            ]
        },
    ),
    (
        [
            TurnView(7, "user", "哈哈谢谢，你太有耐心了 :)"),
            TurnView(8, "assistant", "不客气！Happy to help."),
        ],
        TaskState(),
        {"units": []},
    ),
]


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text) - limit} more chars]"


def _tool_names(turns: Sequence[TurnView]) -> dict[str, str]:
    names: dict[str, str] = {}
    for turn in turns:
        for call in turn.tool_calls or []:
            function = call.get("function") or {}
            if isinstance(call.get("id"), str) and isinstance(function.get("name"), str):
                names[call["id"]] = function["name"]
    return names


def _render_call(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    # Names and ids are the poster's text: one line each, so they cannot forge a turn header.
    name = one_line(str(function.get("name", "?")), NAME_CHARS)
    call_id = one_line(str(call.get("id", "?")), NAME_CHARS)
    return f"  -> call {call_id} {name}({_truncate(arguments, _ARGUMENT_CHARS)})"


def render_turns(turns: Sequence[TurnView], *, tool_result_chars: int = TOOL_RESULT_CHARS) -> str:
    """One block per turn, headed by its seq; tool results truncated."""
    names = _tool_names(turns)
    lines: list[str] = []
    for turn in turns:
        mark = " (emphasized)" if turn.emphasized else ""
        content = turn.content or ""
        if turn.role == "tool":
            call_id = one_line(turn.tool_call_id or "?", NAME_CHARS)
            name = one_line(turn.name or names.get(turn.tool_call_id or "?", "?"), NAME_CHARS)
            head = f"[seq {turn.seq}] tool result of {call_id} {name}{mark}"
            lines.append(f"{head}: {_truncate(content, tool_result_chars)}")
            continue
        head = f"[seq {turn.seq}] {turn.role}{mark}:"
        lines.append(f"{head} {_truncate(content, MESSAGE_CHARS)}" if content else head)
        lines.extend(_render_call(call) for call in turn.tool_calls or [])
    return "\n".join(lines)


def _section(title: str, items: list[str]) -> list[str]:
    recent = items[-_STATE_ITEMS:]
    return (
        [f"{title}:", *(f"- {clip(item, _STATE_ITEM_CHARS)}" for item in recent)] if recent else []
    )


def render_state(state: TaskState) -> str:
    """The state in brief: enough for the model to report changes, not a dump."""
    lines = [f"goal: {clip(state.goal.text, _STATE_ITEM_CHARS)}"] if state.goal else []
    lines += _section("constraints", [c.text for c in state.active_constraints()])
    lines += _section("high stakes", [f"{h.category}: {h.text}" for h in state.high_stakes])
    lines += _section("decisions", [d.text for d in state.decisions if d.status == "active"])
    lines += _section("parameters", [f"{p.name} = {p.value}" for p in state.parameters])
    lines += _section("open confirmations", [p.text for p in state.open_pending()])
    lines += _section("open todos", [t.text for t in state.todos if t.status == "open"])
    lines += _section(
        "actions", [f"{a.tool} ({a.status}) {a.call_id or ''}".rstrip() for a in state.actions]
    )
    lines += _section("artifacts", [f"{a.kind} {a.value}" for a in state.artifacts])
    return "\n".join(lines) or "(empty)"


def _user_message(turns: Sequence[TurnView], state: TaskState, tool_result_chars: int) -> str:
    return (
        f"Current state:\n{render_state(state)}\n\n"
        f"Turns:\n{render_turns(turns, tool_result_chars=tool_result_chars)}"
    )


def build_messages(
    turns: Sequence[TurnView], state: TaskState, *, tool_result_chars: int = TOOL_RESULT_CHARS
) -> list[dict[str, Any]]:
    """System instruction with the schema, the worked examples, then the request."""
    schema = json.dumps(units_json_schema(), ensure_ascii=False, separators=(",", ":"))
    messages: list[dict[str, Any]] = [{"role": "system", "content": _SYSTEM.format(schema=schema)}]
    for example_turns, example_state, reply in _EXAMPLES:
        messages.append(
            {"role": "user", "content": _user_message(example_turns, example_state, 10_000)}
        )
        messages.append({"role": "assistant", "content": json.dumps(reply, ensure_ascii=False)})
    messages.append({"role": "user", "content": _user_message(turns, state, tool_result_chars)})
    return messages


# --------------------------------------------------------------------------- reply


def _strip_fence(content: str) -> str:
    # Some servers ignore response_format and wrap the object in ```json fences.
    text = content.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text[3:-3]
        if text.startswith("json"):
            text = text[4:]
    return text.strip()


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False)[:_MAX_PROBLEMS]:
        if error["type"] == "json_invalid":
            problems.append(f"it is not valid JSON ({error['msg']})")
            continue
        where = ".".join(str(part) for part in error["loc"]) or "the reply"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def _seq_list(seqs: Collection[int]) -> str:
    ordered = sorted(seqs)
    if ordered and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}..{ordered[-1]}"
    return ", ".join(map(str, ordered))


def _semantic_problems(units: list[Unit], seqs: Collection[int]) -> list[str]:
    problems = []
    for i, unit in enumerate(units):
        invented = sorted(set(unit.source_seqs) - set(seqs))
        if invented:
            problems.append(
                f"units.{i} ({unit.kind}): source_seqs {invented} are not seqs of the given "
                f"turns ({_seq_list(seqs)})"
            )
        for name in _TEXT_FIELDS:
            value = getattr(unit, name, None)
            if isinstance(value, str) and not value.strip():
                problems.append(f"units.{i} ({unit.kind}): {name} is blank")
    return problems


def validate_reply(content: str, seqs: Collection[int]) -> list[Unit]:
    """The units of a model reply, or InvalidReply saying what is wrong with it."""
    try:
        units = parse_units(_strip_fence(content))
    except ValidationError as exc:
        raise InvalidReply(_describe(exc)) from exc
    problems = _semantic_problems(units, seqs)
    if problems:
        raise InvalidReply("; ".join(problems[:_MAX_PROBLEMS]))
    return units


def _correction(reply: str, error: InvalidReply) -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": _truncate(reply, _ECHO_CHARS)},
        {
            "role": "user",
            "content": (
                f"Your previous reply was invalid because {error}. Reply again with ONLY the "
                'corrected JSON object {"units": [...]}, citing only seqs from the turns.'
            ),
        },
    ]


# --------------------------------------------------------------------------- extractor


class LLMExtractor:
    """An ``Extractor`` backed by a chat model; raises ``ExtractionFailed`` when it gives up.

    ``max_retries`` bounds the calls to ``1 + max_retries`` whatever goes wrong
    (invalid replies and unavailability share the budget).
    """

    def __init__(
        self,
        client: Chat,
        *,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        max_backoff_s: float = 5.0,
        tool_result_chars: int = TOOL_RESULT_CHARS,
    ) -> None:
        self.name = f"llm:{client.model}"
        self._client = client
        self._max_attempts = 1 + max_retries
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._tool_result_chars = tool_result_chars
        self._schema = units_json_schema()

    async def extract(self, turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
        units, _ = await self.extract_counted(turns, state)
        return units

    async def extract_counted(
        self, turns: Sequence[TurnView], state: TaskState
    ) -> tuple[list[Unit], int]:
        """The units and the number of model calls it took."""
        if not turns:
            return [], 0
        seqs = {turn.seq for turn in turns}
        base = build_messages(turns, state, tool_result_chars=self._tool_result_chars)
        messages = base
        last_error = ""
        for attempt in range(1, self._max_attempts + 1):
            try:
                reply = await self._client.complete_json(messages, schema=self._schema)
            except LLMUnavailable as exc:
                last_error = str(exc)
                await self._backoff(attempt, exc.retry_after_s)
                continue
            except LLMBadResponse as exc:
                # A 4xx or a broken envelope: the same request would fail the same way.
                raise ExtractionFailed(_reason(str(exc)), attempts=attempt) from exc
            try:
                return validate_reply(reply, seqs), attempt
            except InvalidReply as exc:
                last_error = f"invalid output ({exc})"
                # Only the latest correction is kept, so the prompt stays bounded.
                messages = [*base, *_correction(reply, exc)]
        raise ExtractionFailed(
            _reason(last_error, f" after {self._max_attempts} attempts"),
            attempts=self._max_attempts,
        )

    async def _backoff(self, attempt: int, retry_after_s: float | None) -> None:
        delay = decide_retry(
            attempt=attempt,
            max_attempts=self._max_attempts,
            base_s=self._backoff_s,
            max_s=self._max_backoff_s,
        )
        if isinstance(delay, GiveUp):
            return
        if retry_after_s is not None:  # the server's 429 hint, within our cap
            delay = min(max(delay, retry_after_s), self._max_backoff_s)
        await asyncio.sleep(delay)


def _reason(detail: str, suffix: str = "") -> str:
    # The detail is clipped, never the suffix: "after N attempts" must survive.
    return f"llm: {clip(detail, _REASON_CHARS)}{suffix}"

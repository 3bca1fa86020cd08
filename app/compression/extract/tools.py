"""Tool calls and their results: pairing, success/failure, and a short summary.

A tool result can be megabytes of JSON or a stack trace. The state keeps only
what stops an agent from redoing or misreporting the call: the status, the
ids it produced, counts, a few key fields, and JSONPaths to find the rest in
the archived turn. Nothing is copied raw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.compression.extract.entities import Found, find_artifacts
from app.compression.state import (
    ActionStatus,
    ActionUnit,
    ArtifactKind,
    ArtifactUnit,
    ResultType,
    Unit,
)
from app.compression.text import clip
from app.core.turns import TurnView

SUMMARY_CHARS = 240
# How much of a text result the failure cues are looked for in: an error says so at
# the start, a stack trace at the end. A 200,000-character log is not read whole.
_FAILURE_HEAD_CHARS = 4096
_FAILURE_TAIL_CHARS = 1024
_ARTIFACT_CHARS = 4000
_FIELD_CHARS = 48
_MAX_FIELDS = 6
_MAX_ARTIFACTS = 8
_MAX_REF_PATHS = 8

_FAIL_WORDS = frozenset(
    "error errored failed failure fail denied rejected timeout timed_out unauthorized forbidden "
    "not_found notfound invalid exception aborted declined unavailable refused 失败 错误 异常 超时 "
    "拒绝".split()
)
_ERROR_KEYS = ("error", "errors", "exception", "traceback", "error_message", "errmsg", "fault")
_ERRCODE_KEYS = ("errcode", "err_code", "error_code")
_STATUS_KEYS = ("status", "state", "result", "outcome")
_HTTP_KEYS = ("status_code", "statuscode", "http_status", "httpstatus", "http_code", "code")
_FLAG_KEYS = ("success", "ok", "succeeded")

# ``^[^\S\n]*``, not ``^\s*``: with MULTILINE, ``\s*`` ran from every line start over
# all the blank lines after it ("x" + "\n" * 10_000 + "x" took seconds).
_TEXT_FAILURE = re.compile(
    r"^[^\S\n]*+(?:error|err|exception|fatal|failed|failure|traceback|panic)\b"
    r"|Traceback \(most recent call last\)"
    r"|^[^\S\n]*+[A-Za-z_.]*(?:Error|Exception)\b[^\S\n]*+[:(]"
    r"|\b[45]\d\d\s+(?:Bad Request|Unauthorized|Payment Required|Forbidden|Not Found"
    r"|Method Not Allowed|Conflict|Gone|Unprocessable Entity|Too Many Requests"
    r"|Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout)"
    r"|\b(?:timed out|connection refused|permission denied|access denied)\b"
    r"|^[^\S\n]*+(?:错误|失败|异常|超时|报错)|(?:请求|调用|执行|操作|连接)(?:失败|超时|出错|被拒绝)",
    re.IGNORECASE | re.MULTILINE,
)

_ID_KEY = re.compile(
    r"^(?:id|uuid|guid|pnr|ref|reference|locator|record_?locator|confirmation(?:_?(?:code|number|no))?"
    r"|.*(?:_id|Id|ID|_ref|_no|_number|_code))$"
)
# A value shaped like an id whatever its key: a code with letters and digits
# ("CHG-8646425", "VIS-974214") or a merge-request style "!1648" / "#311".
_ID_VALUE = re.compile(r"(?:[!#]\d{2,12}|(?=[A-Za-z0-9_-]{0,39}\d)[A-Za-z][A-Za-z0-9_-]{1,39})$")
_SECRET_KEY = re.compile(
    r"card|account|acct|phone|passport|ssn|cvv|cvc|pin\b|password|passwd|secret|token|api_?key"
    r"|iban|routing|zip|postal",
    re.IGNORECASE,
)
_BOOKING_KEY = re.compile(
    r"pnr|booking|confirm|reservation|locator|ticket|order|invoice|tracking", re.IGNORECASE
)
_LOCATION_KEY = re.compile(
    r"^(?:.*_)?(?:path|file|filename|filepath|uri|url|output|dest|destination|location|s3_?uri|link)$",
    re.IGNORECASE,
)
_PATH_STEP = re.compile(r"[.\[]")  # "$.booking.pnr" → "$", "booking", "pnr"
_TABLE_KEY = re.compile(r"^(?:.*_)?table(?:_?name)?$", re.IGNORECASE)
# Fields that tell an agent what happened, in the order they are worth showing.
_SALIENT_KEY = re.compile(
    r"status|state|message|msg|name|title|total|count|num|amount|price|cost|currency|date|time"
    r"|depart|arriv|from|to|city|result|score|accuracy|loss|size|rows|version",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str | None
    tool: str
    arguments: dict[str, Any]
    seq: int
    at: datetime | None


@dataclass(slots=True)
class Outcome:
    status: ActionStatus
    result_type: ResultType
    summary: str
    ref_paths: list[str] = field(default_factory=list)
    result_keys: list[str] = field(default_factory=list)
    artifacts: list[Found] = field(default_factory=list)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool arguments as a dict; text that is not JSON is kept (clipped) under ``_raw``.

    Ingest stores arguments verbatim, JSON or not (models sometimes write invalid JSON,
    and refusing the message would lose the turn), so anything may arrive here.
    """
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested past the stack
            return {"_raw": clip(raw, 200)}
        return value if isinstance(value, dict) else {"_value": value}
    return {"_value": raw}


def calls_of(turn: TurnView) -> list[ToolCall]:
    calls = []
    for call in turn.tool_calls or ():
        function = call.get("function") or {}
        name = function.get("name") or call.get("name") or "unknown_tool"
        calls.append(
            ToolCall(
                call_id=call.get("id"),
                tool=str(name),
                arguments=parse_arguments(function.get("arguments", call.get("arguments"))),
                seq=turn.seq,
                at=turn.created_at,
            )
        )
    return calls


def _decode(content: str | None) -> tuple[bool, Any]:
    if content is None:
        return False, None
    stripped = content.strip()
    if stripped[:1] in ("{", "[") or stripped in ("null", "true", "false"):
        try:
            return True, json.loads(stripped)
        except (ValueError, RecursionError):  # RecursionError: nested thousands deep
            pass
    return False, stripped


def _lower_keys(obj: dict[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in obj.items()}


def _dict_failed(obj: dict[str, Any]) -> str | None:
    """The error message if this JSON object reports a failure, else None."""
    low = _lower_keys(obj)
    for key in _ERROR_KEYS:
        if low.get(key):
            value = low[key]
            if isinstance(value, dict):
                value = value.get("message") or value.get("msg") or json.dumps(value)
            return str(value)
    for key in _FLAG_KEYS:
        if low.get(key) is False:
            return str(low.get("message") or low.get("msg") or f"{key}=false")
    for key in _ERRCODE_KEYS:
        if isinstance(low.get(key), int) and low[key] != 0:
            return str(low.get("errmsg") or low.get("message") or f"{key}={low[key]}")
    for key in _STATUS_KEYS:
        value = low.get(key)
        if isinstance(value, str) and value.strip().lower().replace(" ", "_") in _FAIL_WORDS:
            return str(low.get("message") or low.get("detail") or low.get("reason") or value)
    for key in _HTTP_KEYS:
        value = low.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            detail = low.get("message") or low.get("detail") or low.get("reason") or ""
            return f"HTTP {value} {detail}".strip()
    return None


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return clip(value, _FIELD_CHARS)
    return clip(json.dumps(value, ensure_ascii=False), _FIELD_CHARS)


def _walk(obj: Any, path: str, depth: int) -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of scalar leaves; long lists are not entered (search hits, rows)."""
    if depth > 3:
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}"
            if _scalar(value):
                yield sub, str(key), value
            else:
                yield from _walk(value, sub, depth + 1)
    elif isinstance(obj, list) and len(obj) <= 3:
        for i, value in enumerate(obj):
            yield from _walk(value, f"{path}[{i}]", depth + 1)


def _artifact_kind(key: str, value: str) -> ArtifactKind | None:
    if _SECRET_KEY.search(key):
        return None
    if _TABLE_KEY.match(key):
        return "table"
    if _LOCATION_KEY.match(key):
        if value.startswith(("http://", "https://")):
            return "url"
        return "path" if ("/" in value or "\\" in value) else None
    if _ID_KEY.match(key):
        return "booking_ref" if _BOOKING_KEY.search(key) else "id"
    if _ID_VALUE.match(value):
        return "id"
    return None


def _object_outcome(obj: dict[str, Any]) -> Outcome:
    leaves = list(_walk(obj, "$", 0))
    artifacts: list[Found] = []
    ref_paths: list[str] = []
    for path, key, value in leaves:
        if isinstance(value, bool) or value is None or value == "":
            continue
        kind = _artifact_kind(key, str(value))
        if kind is not None and len(artifacts) < _MAX_ARTIFACTS:
            artifacts.append(Found(kind, clip(str(value), 200), key))
            ref_paths.append(path)
    parts: list[str] = [f"{f.label}={f.value}" for f in artifacts[:3]]
    shown_keys = {f.label for f in artifacts[:3]}
    shown_paths = set(ref_paths[:3])
    for path, key, value in leaves:
        if len(parts) >= _MAX_FIELDS:
            break
        if key not in shown_keys and _SALIENT_KEY.search(key) and not _SECRET_KEY.search(key):
            parts.append(f"{key}={_fmt(value)}")
            shown_keys.add(key)
            shown_paths.add(path)
    for key, value in obj.items():
        if isinstance(value, list):
            parts.append(f"{key}: {len(value)} items")
            shown_paths.add(f"$.{key}")
            if len(ref_paths) < _MAX_REF_PATHS:
                ref_paths.append(f"$.{key}")
    if not parts:
        for key, value in list(obj.items())[:3]:
            if _scalar(value):
                parts.append(f"{key}={_fmt(value)}")
                shown_paths.add(f"$.{key}")
    top_shown = {_PATH_STEP.split(p[2:], maxsplit=1)[0] for p in shown_paths}
    hidden = sum(1 for k in obj if str(k) not in top_shown)
    if hidden:
        parts.append(f"+{hidden} more fields")
    return Outcome(
        status="done",
        result_type="object",
        summary=clip(", ".join(parts), SUMMARY_CHARS),
        ref_paths=ref_paths[:_MAX_REF_PATHS],
        result_keys=[str(k) for k in list(obj)[:12]],
        artifacts=artifacts,
    )


def _list_outcome(items: list[Any]) -> Outcome:
    summary = f"{len(items)} items"
    result_keys: list[str] = []
    artifacts: list[Found] = []
    if items and isinstance(items[0], dict):
        first = _object_outcome(items[0])
        result_keys = first.result_keys
        summary += f"; first: {clip(first.summary, 160)}"
        # A handful of results are likely chosen/created things; hundreds are search hits.
        if len(items) <= 3:
            artifacts = first.artifacts
    elif items:
        summary += f"; first: {_fmt(items[0])}"
    return Outcome(
        "done",
        "list",
        clip(summary, SUMMARY_CHARS),
        ["$[0]"] if items else [],
        result_keys,
        artifacts,
    )


def _text_failed(text: str) -> bool:
    if len(text) > _FAILURE_HEAD_CHARS + _FAILURE_TAIL_CHARS:
        head, tail = text[:_FAILURE_HEAD_CHARS], text[-_FAILURE_TAIL_CHARS:]
        return _TEXT_FAILURE.search(head) is not None or _TEXT_FAILURE.search(tail) is not None
    return _TEXT_FAILURE.search(text) is not None


def _text_outcome(text: str) -> Outcome:
    if not text:
        return Outcome("done", "empty", "(empty)")
    failed = _text_failed(text)
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    if failed:
        # Stack traces bury the message on the last line.
        lines = [line for line in text.splitlines() if line.strip()]
        first_line = lines[-1] if "Traceback" in text and lines else first_line
    summary = clip(first_line, 160)
    if len(text) > 200:
        summary += f" ({len(text)} chars, {text.count(chr(10)) + 1} lines)"
    return Outcome(
        status="failed" if failed else "done",
        result_type="error" if failed else "text",
        summary=summary,
        artifacts=[] if failed else find_artifacts(text[:_ARTIFACT_CHARS], limit=_MAX_ARTIFACTS),
    )


def classify_result(content: str | None) -> Outcome:
    """Status, type and summary of one tool result message."""
    is_json, value = _decode(content)
    if not is_json:
        return _text_outcome(value or "")
    if isinstance(value, dict):
        error = _dict_failed(value)
        if error is not None:
            return Outcome(
                "failed",
                "error",
                clip(f"error: {error}", SUMMARY_CHARS),
                result_keys=[str(k) for k in list(value)[:12]],
            )
        return _object_outcome(value)
    if isinstance(value, list):
        return _list_outcome(value)
    if value is None:
        return Outcome("done", "null", "null")
    if isinstance(value, bool):
        return Outcome("done", "boolean", str(value).lower())
    if isinstance(value, int | float):
        return Outcome("done", "number", str(value))
    return _text_outcome(str(value))


def result_status(content: str | None) -> ActionStatus:
    """``classify_result(content).status`` without the summary and artifacts.

    The ingest trigger policy asks this of the latest tool results on every post
    of a session with tools, on the request path: it reads a bounded window of a
    text result and never looks for artifacts.
    """
    is_json, value = _decode(content)
    if not is_json:
        return "failed" if value and _text_failed(value) else "done"
    if isinstance(value, dict) and _dict_failed(value) is not None:
        return "failed"
    return "done"


def _argument_artifacts(arguments: dict[str, Any]) -> list[Found]:
    """Paths and tables a successful call wrote to or read from."""
    found = []
    for key, value in arguments.items():
        if isinstance(value, str) and value:
            kind = _artifact_kind(key, value)
            if kind in ("path", "url", "table"):
                found.append(Found(kind, clip(value, 200), key))
    return found


def action_units(turns: Sequence[TurnView]) -> list[Unit]:
    """One action unit per tool call (paired with its result by id) plus its artifacts."""
    results = {t.tool_call_id: t for t in turns if t.role == "tool" and t.tool_call_id}
    units: list[Unit] = []
    paired: set[str] = set()
    for turn in turns:
        for call in calls_of(turn):
            result = results.get(call.call_id) if call.call_id else None
            if result is not None and call.call_id:
                paired.add(call.call_id)
            units.extend(_call_units(call, result, turn.emphasized))
    # A result whose call was compacted earlier (or never recorded) still happened.
    for turn in turns:
        if turn.role == "tool" and turn.tool_call_id not in paired:
            orphan = ToolCall(
                turn.tool_call_id, turn.name or "unknown_tool", {}, turn.seq, turn.created_at
            )
            units.extend(_call_units(orphan, turn, turn.emphasized))
    return units


def _call_units(call: ToolCall, result: TurnView | None, emphasized: bool) -> list[Unit]:
    seqs = sorted({call.seq} | ({result.seq} if result else set()))
    if result is None:
        outcome = Outcome("unknown", "empty", "no result recorded")
    else:
        outcome = classify_result(result.content)
    units: list[Unit] = [
        ActionUnit(
            tool=call.tool,
            arguments=call.arguments,
            status=outcome.status,
            result_summary=outcome.summary,
            result_type=outcome.result_type,
            ref_paths=outcome.ref_paths,
            result_keys=outcome.result_keys,
            call_id=call.call_id,
            at=(result.created_at if result else None) or call.at,
            source_seqs=seqs,
            emphasized=emphasized,
        )
    ]
    if outcome.status == "done":
        found = outcome.artifacts + _argument_artifacts(call.arguments)
        for item in found[:_MAX_ARTIFACTS]:
            units.append(
                ArtifactUnit(
                    artifact_kind=item.kind,
                    value=item.value,
                    label=item.label,
                    source_seqs=[seqs[-1]],
                )
            )
    return units

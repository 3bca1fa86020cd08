"""Request and response bodies of the v1 API (separate from the table models)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from app.core.limits import JSON_DEPTH, MAX_METADATA_BYTES, MAX_TOOL_CALLS, NAME_CHARS

ID_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"


def storable(value: str) -> str:
    """Text Postgres can store: no NUL character, no unpaired surrogate."""
    if "\x00" in value:
        raise ValueError("the NUL character (\\u0000) is not accepted")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid Unicode (an unpaired surrogate)") from None
    return value


def storable_tree(value: Any) -> Any:
    """``storable`` over every key and string inside a JSON value, at most JSON_DEPTH deep.

    Iterative, so a hostile depth is refused instead of overflowing the stack.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            storable(item)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > JSON_DEPTH:
            raise ValueError(f"nested deeper than {JSON_DEPTH} levels")
        if isinstance(item, dict):
            for key in item:
                storable(key)
            stack.extend((child, depth + 1) for child in item.values())
        else:
            stack.extend((child, depth + 1) for child in item)
    return value


def bounded_metadata(value: dict[str, Any]) -> dict[str, Any]:
    size = len(json.dumps(value, ensure_ascii=False))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"{size} characters as JSON; the limit is {MAX_METADATA_BYTES}")
    return value


Text = Annotated[str, AfterValidator(storable)]
JsonObject = Annotated[
    dict[str, Any], AfterValidator(storable_tree), AfterValidator(bounded_metadata)
]
ExternalId = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
QueryText = Annotated[str, StringConstraints(max_length=4000), AfterValidator(storable)]
Role = Literal["system", "user", "assistant", "tool"]


Name = Annotated[Text, StringConstraints(min_length=1, max_length=NAME_CHARS)]

# This module is the one place that lists the fields a message may carry: every
# model refuses unknown fields (422 naming them), so nothing reaches the archive,
# the state or a context without being bounded here or in ``ingest/validate.py``
# and counted by ``core/tokens.count_message_tokens``.


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    arguments: Text = Field(
        description=(
            "JSON-encoded arguments, as the OpenAI API sends them: at most "
            "`MNEMO_MAX_CONTENT_CHARS` characters (413) and 64 levels deep (422)."
        )
    )


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Name
    type: Literal["function"] = "function"
    function: FunctionCall


class MessageIn(BaseModel):
    """One chat message in OpenAI format, plus Mnemo's optional fields."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: Text | None = None
    id: ExternalId | None = Field(default=None, description="Client message id; idempotency key.")
    name: Annotated[Text, StringConstraints(max_length=NAME_CHARS)] | None = None
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=MAX_TOOL_CALLS)
    tool_call_id: Name | None = None
    emphasized: bool = False
    created_at: datetime | None = None
    metadata: JsonObject = Field(default_factory=dict)


class TurnsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: ExternalId
    messages: list[MessageIn] = Field(min_length=1)


class TurnAck(BaseModel):
    id: str
    seq: int
    tokens: int
    duplicate: bool


class TurnsOut(BaseModel):
    session_id: str
    user_id: str
    turns: list[TurnAck]
    history_tokens: int
    compression_scheduled: bool
    trigger: str | None


class SessionOut(BaseModel):
    session_id: str
    user_id: str
    created_at: datetime
    turn_count: int
    history_tokens: int
    state_version: int
    pending_jobs: int
    last_compression_at: datetime | None
    compressions: int


class ContextMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Role
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class ContextBlock(BaseModel):
    kind: str
    tokens: int


class ContextOut(BaseModel):
    session_id: str
    user_id: str
    state_version: int
    messages: list[dict[str, Any]]
    text: str
    blocks: list[ContextBlock]
    tokens: int
    max_tokens: int
    full_history_tokens: int = Field(
        description="What the whole raw history would cost: the baseline this context replaces."
    )
    memory_ids: list[int] = Field(
        default_factory=list, description="Long-term memories placed in this context."
    )


class StateOut(BaseModel):
    version: int
    state: dict[str, Any]
    updated_at: datetime | None
    rendered: str


class TurnOut(BaseModel):
    id: str
    seq: int
    role: Role
    content: str | None
    name: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    tokens: int
    emphasized: bool
    metadata: dict[str, Any]
    created_at: datetime
    compacted: bool


class TurnsPage(BaseModel):
    turns: list[TurnOut]
    next_after_seq: int | None


class Problem(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] | None = None


MemoryKind = Literal["preference", "profile", "rule", "high_stakes", "episode", "fact"]


class MemoryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Annotated[Text, StringConstraints(min_length=1, max_length=4000)]
    kind: MemoryKind = "fact"
    pinned: bool = Field(default=False, description="Pinned memories never expire.")
    ttl_days: int | None = Field(
        default=None, ge=1, le=36500, description="Days until expiry; default from settings."
    )
    metadata: JsonObject = Field(default_factory=dict)


class MemoryPublic(BaseModel):
    id: int
    text: str
    kind: str
    score: float | None = None
    pinned: bool
    expires_at: datetime | None
    created_at: datetime
    last_confirmed_at: datetime
    times_confirmed: int
    source: dict[str, Any]
    metadata: dict[str, Any]
    deduplicated: bool = Field(
        default=False, description="On create: an equal memory existed and was confirmed."
    )


class MemoriesOut(BaseModel):
    memories: list[MemoryPublic]

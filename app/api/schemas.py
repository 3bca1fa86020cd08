"""Request and response bodies of the v1 API (separate from the table models)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

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
    """``storable`` over every key and string inside a JSON value."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        for key, item in value.items():
            storable(key)
            storable_tree(item)
    elif isinstance(value, list):
        for item in value:
            storable_tree(item)
    return value


Text = Annotated[str, AfterValidator(storable)]
JsonObject = Annotated[dict[str, Any], AfterValidator(storable_tree)]
ExternalId = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
QueryText = Annotated[str, StringConstraints(max_length=4000), AfterValidator(storable)]
Role = Literal["system", "user", "assistant", "tool"]


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: Annotated[Text, StringConstraints(min_length=1, max_length=256)]
    arguments: Text = Field(description="JSON-encoded arguments, as the OpenAI API sends them.")


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: Annotated[Text, StringConstraints(min_length=1, max_length=256)]
    type: Literal["function"] = "function"
    function: FunctionCall


class MessageIn(BaseModel):
    """One chat message in OpenAI format, plus Mnemo's optional fields."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: Text | None = None
    id: ExternalId | None = Field(default=None, description="Client message id; idempotency key.")
    name: Annotated[Text, StringConstraints(max_length=256)] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: Annotated[Text, StringConstraints(min_length=1, max_length=256)] | None = None
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

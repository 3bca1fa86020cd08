"""Request and response bodies of the v1 API (separate from the table models)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

ID_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
ExternalId = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Role = Literal["system", "user", "assistant", "tool"]


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    arguments: str = Field(description="JSON-encoded arguments, as the OpenAI API sends them.")


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    type: Literal["function"] = "function"
    function: FunctionCall


class MessageIn(BaseModel):
    """One chat message in OpenAI format, plus Mnemo's optional fields."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str | None = None
    id: ExternalId | None = Field(default=None, description="Client message id; idempotency key.")
    name: Annotated[str, StringConstraints(max_length=256)] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    emphasized: bool = False
    created_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


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
    text: Annotated[str, StringConstraints(min_length=1, max_length=4000)]
    kind: MemoryKind = "fact"
    pinned: bool = Field(default=False, description="Pinned memories never expire.")
    ttl_days: int | None = Field(
        default=None, ge=1, le=36500, description="Days until expiry; default from settings."
    )
    metadata: dict[str, Any] = Field(default_factory=dict)


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

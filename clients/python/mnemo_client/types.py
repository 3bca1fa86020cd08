"""The shapes Mnemo answers with (see docs/openapi.json); a test keeps them in step."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Role = Literal["system", "developer", "user", "assistant", "tool"]


class Message(TypedDict, total=False):
    """A chat message as the OpenAI Chat Completions API has it, plus Mnemo's fields."""

    role: Role
    content: str | list[dict[str, Any]] | None
    id: str
    name: str
    tool_calls: list[dict[str, Any]]
    tool_call_id: str
    emphasized: bool
    created_at: str
    metadata: dict[str, Any]


class TurnAck(TypedDict):
    id: str
    seq: int
    tokens: int
    duplicate: bool


class TurnsOut(TypedDict):
    session_id: str
    user_id: str
    turns: list[TurnAck]
    history_tokens: int
    compression_scheduled: bool
    trigger: str | None


class ContextBlock(TypedDict):
    kind: str
    tokens: int


class Context(TypedDict):
    session_id: str
    user_id: str
    state_version: int
    messages: list[dict[str, Any]]
    text: str
    blocks: list[ContextBlock]
    tokens: int
    max_tokens: int
    full_history_tokens: int
    memory_ids: list[int]


class Session(TypedDict):
    session_id: str
    user_id: str
    created_at: str
    turn_count: int
    history_tokens: int
    state_version: int
    pending_jobs: int
    last_compression_at: str | None
    compressions: int


class State(TypedDict):
    version: int
    state: dict[str, Any]
    updated_at: str | None
    rendered: str


class Turn(TypedDict):
    id: str
    seq: int
    role: str
    content: str | None
    name: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    tokens: int
    emphasized: bool
    metadata: dict[str, Any]
    created_at: str
    compacted: bool


class PoppedTurn(TypedDict):
    session_id: str
    turn: Turn
    turn_count: int
    history_tokens: int


class TurnsPage(TypedDict):
    turns: list[Turn]
    next_after_seq: int | None


class Memory(TypedDict):
    id: int
    text: str
    kind: str
    score: float | None
    pinned: bool
    expires_at: str | None
    created_at: str
    last_confirmed_at: str
    times_confirmed: int
    source: dict[str, Any]
    metadata: dict[str, Any]
    deduplicated: bool


class Memories(TypedDict):
    memories: list[Memory]


class Compaction(TypedDict):
    status: Literal["scheduled", "compressed", "nothing_to_compress"]
    job_id: int
    id: NotRequired[int]


class Events(TypedDict):
    events: list[dict[str, Any]]

"""Request and response bodies of the v1 API (separate from the table models)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    ModelWrapValidatorHandler,
    PlainSerializer,
    PrivateAttr,
    StrictBool,
    StringConstraints,
    Tag,
    TypeAdapter,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from typing_extensions import TypeAliasType

from app.compression.triggers import TriggerReason
from app.core.limits import JSON_DEPTH, MAX_METADATA_BYTES, MAX_TOOL_CALLS, NAME_CHARS

ID_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
# ``storable``'s rule as JSON Schema states it, so a generated client or fuzzer knows a
# schema-valid string is stored: no U+0000 (Postgres text and jsonb cannot hold it).
# Unpaired surrogates are refused too, but JSON Schema cannot say so.
NUL_FREE = r"^[^\u0000]*$"


class NulFree:
    """Marker: the string (or, on an object, each key) matches ``NUL_FREE`` in the schema."""

    def __init__(self, *, keys: bool = False) -> None:
        self.keys = keys

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        if self.keys:
            schema["propertyNames"] = {"pattern": NUL_FREE}
        else:
            schema["pattern"] = NUL_FREE
        return schema


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


def as_posted(value: Any) -> Any:
    return value


NulFreeStr = Annotated[str, NulFree()]  # the schema only; ``storable`` validates
Text = Annotated[str, AfterValidator(storable), NulFree()]
# What the schema promises a JSON value inside ``metadata`` may be: any JSON whose
# strings and keys are NUL-free. Validation stays ``storable_tree`` (iterative, depth
# bounded); these types only document it (mypy cannot follow the recursion: Any to it).
# Arrays reach back to the recursion through an object only: TypeScript refuses an
# array of its own alias (openapi-typescript writes one as `X[]`), so arrays nested
# directly in arrays are described ARRAY_NESTING deep, and anything below that is not.
ARRAY_NESTING = 4
if TYPE_CHECKING:
    JsonValue = Any
else:
    JsonMap = TypeAliasType("JsonMap", Annotated[dict[str, "JsonValue"], NulFree(keys=True)])

    def _json_array(depth: int) -> Any:
        inner = _json_array(depth - 1) if depth > 1 else list[Any]
        return list[NulFreeStr | int | float | bool | JsonMap | inner | None]

    JsonValue = TypeAliasType(
        "JsonValue",
        NulFreeStr | int | float | bool | _json_array(ARRAY_NESTING) | JsonMap | None,
    )
JsonObject = Annotated[
    dict[str, Any],
    BeforeValidator(
        as_posted,
        json_schema_input_type=Annotated[dict[str, JsonValue], NulFree(keys=True)],
    ),
    AfterValidator(storable_tree),
    AfterValidator(bounded_metadata),
]
ExternalId = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
QueryText = Annotated[Text, StringConstraints(max_length=4000)]
Role = Literal["system", "user", "assistant", "tool"]


Name = Annotated[Text, StringConstraints(min_length=1, max_length=NAME_CHARS)]

# This module is the one place that lists the fields a message may carry: every
# model refuses unknown fields (422 naming them), so nothing reaches the archive,
# the state or a context without being bounded here or in ``api/validate.py``
# and counted by ``core/tokens.count_message_tokens``.


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    arguments: Text = Field(
        description=(
            "The arguments as the model wrote them, normally JSON: at most "
            "`MNEMO_MAX_CONTENT_CHARS` characters (413). Text that is not JSON (models "
            "sometimes produce it) is stored and given back verbatim."
        )
    )


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Name
    type: Literal["function"] = "function"
    function: FunctionCall


# ---- What the OpenAI SDKs send, accepted as they send it --------------------------
# Content parts (Chat Completions and the Responses API) become one text: text parts
# in order, any other part as a typed placeholder carrying its metadata
# (``[image: https://…]``). Inline data (base64 images, audio, files) is never stored.


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "input_text", "output_text"]
    text: Text
    # Response-only fields of an output_text part (SDK dumps carry them): ignored.
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class RefusalPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["refusal"]
    refusal: Text


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: Text
    detail: Name | None = None


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["image_url"]
    image_url: ImageUrl


class InputImagePart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["input_image"]
    image_url: Text | None = None
    file_id: Name | None = None
    detail: Name | None = None


class InputAudio(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data: str
    format: Name


class AudioPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["input_audio"]
    input_audio: InputAudio


class FileRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file_data: str | None = None
    file_id: Name | None = None
    filename: Name | None = None


class FilePart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["file"]
    file: FileRef


class InputFilePart(FileRef):
    type: Literal["input_file"]
    file_url: Text | None = None


ContentPart = Annotated[
    TextPart | RefusalPart | ImagePart | InputImagePart | AudioPart | FilePart | InputFilePart,
    Field(discriminator="type"),
]
CONTENT_PARTS: TypeAdapter[list[ContentPart]] = TypeAdapter(list[ContentPart])


def _where(url: str | None) -> str | None:
    """A URL as a placeholder shows it; inline data only by its media type and size."""
    if url is None or not url.startswith("data:"):
        return url
    media = url[5:].split(";", 1)[0].split(",", 1)[0] or "data"
    return f"inline {media}, {len(url)} chars"


def _placeholder(part: ContentPart) -> str:
    match part:
        case TextPart():
            return part.text
        case RefusalPart():
            return part.refusal
        case ImagePart():
            detail = f" (detail: {part.image_url.detail})" if part.image_url.detail else ""
            return f"[image: {_where(part.image_url.url)}{detail}]"
        case InputImagePart():
            return f"[image: {_where(part.image_url) or part.file_id or 'inline'}]"
        case AudioPart():
            return f"[audio: {part.input_audio.format}]"
        case InputFilePart():
            shown = part.filename or part.file_id or _where(part.file_url) or "inline"
            return f"[file: {shown}]"
        case FilePart():
            return f"[file: {part.file.filename or part.file.file_id or 'inline'}]"
    raise AssertionError(part)  # the discriminated union has no other member


def content_text(value: Any) -> Any:
    """Content as text: a list of parts is validated (errors name the part) and joined."""
    if not isinstance(value, list):
        return value
    return "\n".join(_placeholder(part) for part in CONTENT_PARTS.validate_python(value))


def developer_is_system(value: Any) -> Any:
    return "system" if value == "developer" else value


Content = Annotated[
    Text | None,
    BeforeValidator(content_text, json_schema_input_type=NulFreeStr | list[ContentPart] | None),
]
# An item's content or output: never null (an item's null fields count as absent).
ItemContent = Annotated[
    Text, BeforeValidator(content_text, json_schema_input_type=NulFreeStr | list[ContentPart])
]


def _role_is(*roles: str) -> dict[str, Any]:
    return {"properties": {"role": {"enum": list(roles)}}, "required": ["role"]}


def _holds(field: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"properties": {field: schema}, "required": [field]}


def _lacks(field: str) -> dict[str, Any]:
    return {"properties": {field: {"type": "null"}}}  # null or absent


_NOT_TOOL = ("system", "developer", "user", "assistant")
_NOT_ASSISTANT = ("system", "developer", "user", "tool")

# ``api/validate.py``'s rules for one message, as JSON Schema states them, so that a
# message the schema allows is one Mnemo stores (clients and fuzzers can see them).
# Each is a plain ``anyOf``: generators handle ``if`` and ``not`` loosely.
MESSAGE_RULES: list[Any] = [  # JSON values, as pydantic types json_schema_extra
    # A tool message answers a call, by its id; no other message carries one.
    {
        "anyOf": [
            {"allOf": [_role_is("tool"), _holds("tool_call_id", {"type": "string"})]},
            {"allOf": [_role_is(*_NOT_TOOL), _lacks("tool_call_id")]},
        ]
    },
    # Only an assistant message makes tool calls.
    {
        "anyOf": [
            _role_is("assistant"),
            {"allOf": [_role_is(*_NOT_ASSISTANT), _lacks("tool_calls")]},
        ]
    },
    # Content is null (or absent) only where something stands in for it: a refusal, an
    # audio transcript, or an assistant message's tool calls.
    {
        "anyOf": [
            _holds("content", {"type": ["string", "array"]}),
            _holds("refusal", {"type": "string"}),
            _holds(
                "audio",
                {"type": "object", **_holds("transcript", {"type": "string", "pattern": NUL_FREE})},
            ),
            {
                "properties": {
                    "role": {"const": "assistant"},
                    "tool_calls": {"type": "array", "minItems": 1},
                },
                "required": ["role", "tool_calls"],
            },
        ]
    },
]


def date_time_text(value: Any) -> Any:
    """A time as posted must be RFC 3339 text: a number is not read as a Unix time."""
    if value is not None and not isinstance(value, str | datetime):
        raise ValueError("an RFC 3339 date-time string")
    return value


class MessageIn(BaseModel):
    """One chat message in OpenAI format, plus Mnemo's optional fields.

    Accepted as the OpenAI SDK produces it: ``content`` as a string or a list of parts,
    ``role: developer`` (stored as ``system``), and the response-only fields of
    ``ChatCompletionMessage.model_dump()`` (``refusal``, ``annotations``, ``audio``,
    a null ``function_call``), which are ignored but for a refusal or an audio
    transcript standing in for null content.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": MESSAGE_RULES})

    role: Annotated[
        Role,
        BeforeValidator(developer_is_system, json_schema_input_type=Literal["developer"] | Role),
    ]
    content: Content = None
    id: ExternalId | None = Field(default=None, description="Client message id; idempotency key.")
    name: Annotated[Text, StringConstraints(max_length=NAME_CHARS)] | None = None
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=MAX_TOOL_CALLS)
    tool_call_id: Name | None = None
    emphasized: StrictBool = False
    created_at: Annotated[datetime | None, BeforeValidator(date_time_text)] = None
    metadata: JsonObject = Field(default_factory=dict)
    refusal: Text | None = Field(default=None, description="Response-only; content if null.")
    annotations: list[Any] | None = Field(default=None, description="Response-only; ignored.")
    audio: dict[str, Any] | None = Field(
        default=None, description="Response-only; its `transcript` is content if null."
    )
    function_call: None = Field(
        default=None, description="Deprecated function calling: only null (use tool_calls)."
    )

    @model_validator(mode="after")
    def _fill_content(self) -> MessageIn:
        if self.content is None and self.refusal is not None:
            self.content = self.refusal
        transcript = (self.audio or {}).get("transcript")
        if self.content is None and isinstance(transcript, str):
            self.content = storable(transcript)
        return self


# ---- Responses API items, in the same ``messages`` list -------------------------------
# An item with a ``type`` is a Responses item: ``message``, ``function_call`` (one
# tool call; consecutive calls become one assistant message, as Chat Completions
# pairs them) or ``function_call_output`` (a tool message). Null fields are ignored
# (SDK dumps carry many); any other type or field is a 422 naming it.


class ResponsesMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["message"]
    role: Literal["system", "developer", "user", "assistant"]
    content: ItemContent  # a string or parts, as in a chat message
    id: ExternalId | None = None
    status: Name | None = None  # response-only
    phase: Name | None = None  # response-only


class FunctionCallItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function_call"]
    call_id: Name
    name: Name
    arguments: Text  # as in a chat tool call: stored verbatim, JSON or not
    id: ExternalId | None = None
    status: Name | None = None  # response-only
    namespace: Name | None = None


class FunctionCallOutputItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function_call_output"]
    call_id: Name
    output: ItemContent
    id: ExternalId | None = None
    status: Name | None = None  # response-only
    name: Name | None = None  # the tool's name: Chat Completions tool messages have none
    namespace: Name | None = None


ResponsesItem = Annotated[
    ResponsesMessage | FunctionCallItem | FunctionCallOutputItem, Field(discriminator="type")
]
# Keyed by position, so an error's location is the item's index in ``messages``.
RESPONSES_ITEMS: TypeAdapter[dict[int, ResponsesItem]] = TypeAdapter(dict[int, ResponsesItem])


def _kind(value: Any) -> str:
    return "responses" if isinstance(value, dict) and "type" in value else "chat"


def from_responses_items(value: Any) -> Any:
    """Responses items in a message list become chat messages; chat messages pass."""
    if not isinstance(value, list) or not any(_kind(v) == "responses" for v in value):
        return value
    items = RESPONSES_ITEMS.validate_python(
        {
            i: {k: v for k, v in item.items() if v is not None}
            for i, item in enumerate(value)
            if _kind(item) == "responses"
        }
    )
    out: list[Any] = []
    for i, item in enumerate(value):
        parsed = items.get(i)
        if parsed is None:
            out.append(item)
        elif _joins_previous(value, i):
            out[-1]["tool_calls"].extend(_as_chat(parsed)["tool_calls"])
        else:
            out.append(_as_chat(parsed))
    return out


def _joins_previous(value: list[Any], i: int) -> bool:
    """A function call right after another joins its assistant message."""
    return i > 0 and all(
        _kind(v) == "responses" and v.get("type") == "function_call" for v in value[i - 1 : i + 1]
    )


def posted_positions(value: list[Any]) -> list[int]:
    """For each message ``from_responses_items`` made, the index of the item it came from."""
    return [i for i in range(len(value)) if not _joins_previous(value, i)]


# The OpenAI Agents SDK gives every item it builds from a Chat Completions answer this id;
# as a message id it would make each such item after the first look like a resend.
AGENTS_SDK_PLACEHOLDER_ID = "__fake_id__"


def _as_chat(item: ResponsesMessage | FunctionCallItem | FunctionCallOutputItem) -> dict[str, Any]:
    known = item.id and item.id != AGENTS_SDK_PLACEHOLDER_ID
    ident = {"id": item.id} if known else {}
    match item:
        case ResponsesMessage():
            return {"role": item.role, "content": item.content, **ident}
        case FunctionCallItem():
            function = {"name": item.name, "arguments": item.arguments}
            call = {"id": item.call_id, "type": "function", "function": function}
            return {"role": "assistant", "content": None, "tool_calls": [call], **ident}
        case FunctionCallOutputItem():
            return {"role": "tool", "tool_call_id": item.call_id, "content": item.output, **ident}
    raise AssertionError(item)


MessageOrItem = Annotated[
    Annotated[MessageIn, Tag("chat")] | Annotated[ResponsesItem, Tag("responses")],
    Discriminator(_kind),
]


class TurnsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: ExternalId
    messages: Annotated[
        list[MessageIn],
        BeforeValidator(from_responses_items, json_schema_input_type=list[MessageOrItem]),
    ] = Field(
        min_length=1,
        description="Chat Completions messages, Responses API items, or both, in order.",
        json_schema_extra={"minItems": 1},  # the input type's schema omits the bound
    )
    # Where each of ``messages`` was posted (grouped function calls shift indices), so
    # later checks name the field the client sent.
    _positions: list[int] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_positions(cls, data: Any, handler: ModelWrapValidatorHandler[TurnsIn]) -> TurnsIn:
        model = handler(data)
        raw = data.get("messages") if isinstance(data, dict) else None
        model._positions = (
            posted_positions(raw) if isinstance(raw, list) else list(range(len(model.messages)))
        )
        return model

    def posted_index(self, i: int) -> int:
        return self._positions[i] if i < len(self._positions) else i


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
    pinned: StrictBool = Field(default=False, description="Pinned memories never expire.")
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


# Events were served through FastAPI's encoder before they had a model: their times
# keep its ISO form ("+00:00", where pydantic writes "Z"), so no client sees a change.
EventTime = Annotated[
    datetime,
    PlainSerializer(datetime.isoformat, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class EventSummaryOut(BaseModel):
    """One compression of the session, as listed."""

    model_config = ConfigDict(from_attributes=True)  # read from the domain's Event values
    id: int
    created_at: EventTime
    trigger: TriggerReason
    tier: int = Field(
        description="1: the oldest 30% of live turns, 2: the oldest 50%, 3: all but the"
        " working window (and `compact`)."
    )
    state_version: int = Field(description="The task state version this compression wrote.")
    turn_count: int = Field(description="Raw turns it compacted.")
    input_tokens: int
    output_tokens: int = Field(description="Tokens of the rendered state.")
    ratio: float = Field(description="input_tokens / output_tokens.")
    duration_ms: float
    extractor: str
    fallback_reason: str | None = Field(
        description="Why the LLM extractor was not used, or why the rule extractor gave no"
        " units (its deadline); null when the first choice worked."
    )
    change_summary: str
    job_id: int | None
    llm_prompt_tokens: int | None = Field(
        default=None,
        description="Tokens the LLM extractor's calls used, as the API reported them (failed"
        " calls included); null when no LLM was called.",
    )
    llm_completion_tokens: int | None = None


class EventOut(EventSummaryOut):
    """One compression with its inputs, the units extracted and the state rendered."""

    turn_ids: list[str]
    turn_seqs: list[int]
    units: list[dict[str, Any]]
    rendered_state: str


class EventsOut(BaseModel):
    events: list[EventSummaryOut] = Field(description="Newest first.")


class CompactScheduled(BaseModel):
    status: Literal["scheduled"]
    job_id: int


class NothingToCompress(BaseModel):
    """Every live turn is inside the working window."""

    status: Literal["nothing_to_compress"]
    job_id: int


class Compacted(EventOut):
    """``wait=true``: the compression is committed; its event."""

    status: Literal["compressed"]


# ----------------------------------------------------------------------- tasks

AgentName = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
TaskRole = Literal["reader", "contributor"]
TaskSection = Literal["goal", "constraints", "decisions", "actions", "pending", "artifacts"]


class RoleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: TaskRole
    sections: list[TaskSection] | None = Field(
        default=None,
        max_length=6,
        description="The shared sections a contributor writes; omitted: all of them.",
    )


class AgentRoleIn(RoleIn):
    agent: AgentName


class TaskIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: Annotated[str, StringConstraints(pattern=ID_PATTERN)]
    agents: list[AgentRoleIn] = Field(default_factory=list, max_length=100)


class AttachIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: Annotated[str, StringConstraints(pattern=ID_PATTERN)]
    agent: AgentName | None = Field(
        default=None,
        description="The agent the session works for; a key bound to an agent implies it.",
    )


class TaskMemberOut(BaseModel):
    agent: str
    role: TaskRole
    sections: list[TaskSection] | None


class TaskSessionOut(BaseModel):
    session_id: str
    agent: str | None


class TaskOut(BaseModel):
    task_id: str
    created_at: datetime
    updated_at: datetime
    version: int
    agents: list[TaskMemberOut]
    sessions: list[TaskSessionOut]


class CreditOut(BaseModel):
    agent: str
    session_id: str
    seq: int = Field(description="The turn of that session the item came from.")


class AttributedItem(BaseModel):
    section: str
    key: str
    text: str
    contributors: list[CreditOut]


class SharedStateOut(BaseModel):
    task_id: str
    version: int
    state: dict[str, Any]
    attribution: list[AttributedItem]
    rendered: str
    updated_at: datetime


class TaskEventOut(BaseModel):
    id: int
    created_at: datetime
    agent: str
    session_id: str | None
    version: int
    units: int
    change_summary: str


class TaskEventsOut(BaseModel):
    events: list[TaskEventOut]


# ----------------------------------------------------------------------- misses


class MissIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    needed: Annotated[Text, StringConstraints(min_length=1, max_length=4000)] = Field(
        description="What the agent needed and did not find in its context."
    )


class RestoredTurn(BaseModel):
    seq: int
    role: str
    text: str


class MissOut(BaseModel):
    id: int
    detection: Literal["explicit", "reask", "query"]
    needed: str
    restored: list[RestoredTurn] = Field(
        description="Archived turns pinned back into the state (empty: the archive holds"
        " nothing that matches)."
    )
    state_version: int


class PoppedTurnOut(BaseModel):
    """What ``DELETE /v1/sessions/{id}/turns/last`` removed, and the session after it."""

    session_id: str
    turn: TurnOut
    turn_count: int = Field(description="Turns left; the next posted message takes seq +1.")
    history_tokens: int

"""Checks on posted messages beyond their JSON shape. Pure: no I/O.

Pydantic checks types, id patterns and the fixed field limits (``api/schemas.py``);
these rules need the whole message (a tool result needs its call id) or the
configured limits, which are reported in the error so a client can see what it
ran into.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from app.api.schemas import MessageIn
from app.core.errors import FieldError, InvalidInput, PayloadTooLarge


@dataclass(frozen=True)
class Limits:
    max_messages: int
    max_content_chars: int


def check_messages(
    messages: Sequence[MessageIn], limits: Limits, *, posted: Sequence[int] | None = None
) -> None:
    """Raise PayloadTooLarge or InvalidInput naming every field at fault.

    ``posted[i]`` is where message ``i`` stood in the request (Responses items that were
    grouped into one message shift the indices); by default, ``i`` itself.
    """
    where = posted if posted is not None else range(len(messages))
    if len(messages) > limits.max_messages:
        raise PayloadTooLarge(
            f"{len(messages)} messages in one request; the limit is {limits.max_messages}",
            [
                FieldError(
                    ("body", "messages"), f"at most {limits.max_messages} messages", "too_many"
                )
            ],
        )
    oversize = [
        FieldError(at, f"{size} characters; the limit is {limits.max_content_chars}", "too_long")
        for i, m in enumerate(messages)
        for at, size in _long_texts(where[i], m)
        if size > limits.max_content_chars
    ]
    if oversize:
        raise PayloadTooLarge("message content over the size limit", oversize)
    errors = [error for i, m in enumerate(messages) for error in _message_errors(where[i], m)]
    if errors:
        raise InvalidInput(f"{len(errors)} invalid field(s) in messages", errors)


def _long_texts(i: int, m: MessageIn) -> Iterator[tuple[tuple[str | int, ...], int]]:
    """The free-text fields of a message and their sizes: content and each call's arguments."""
    at = ("body", "messages", i)
    if m.content is not None:
        yield (*at, "content"), len(m.content)
    for j, call in enumerate(m.tool_calls or ()):
        yield (*at, "tool_calls", j, "function", "arguments"), len(call.function.arguments)


def _message_errors(i: int, m: MessageIn) -> list[FieldError]:
    at = ("body", "messages", i)
    errors: list[FieldError] = []
    if m.role == "tool" and not m.tool_call_id:
        errors.append(FieldError((*at, "tool_call_id"), "required for role 'tool'", "missing"))
    if m.role != "tool" and m.tool_call_id is not None:
        errors.append(FieldError((*at, "tool_call_id"), "only a 'tool' message carries it"))
    if m.tool_calls is not None and m.role != "assistant":
        errors.append(FieldError((*at, "tool_calls"), "only an 'assistant' message carries it"))
    if m.content is None and not (m.role == "assistant" and m.tool_calls):
        errors.append(
            FieldError(
                (*at, "content"), "null only for an assistant message with tool_calls", "missing"
            )
        )
    return errors

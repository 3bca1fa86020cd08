from __future__ import annotations

import pytest

from app.api.schemas import MessageIn
from app.api.validate import Limits, check_messages
from app.core.errors import InvalidInput, PayloadTooLarge

LIMITS = Limits(max_messages=3, max_content_chars=50)


def msgs(*raw: dict) -> list[MessageIn]:
    return [MessageIn.model_validate(r) for r in raw]


def test_good_messages_pass() -> None:
    check_messages(
        msgs(
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "{}"},
        ),
        LIMITS,
    )


def test_too_many_messages() -> None:
    with pytest.raises(PayloadTooLarge) as exc:
        check_messages(msgs(*[{"role": "user", "content": "x"}] * 4), LIMITS)
    assert exc.value.errors[0].loc == ("body", "messages")


def test_every_fault_is_reported_with_its_field() -> None:
    with pytest.raises(InvalidInput) as exc:
        check_messages(
            msgs(
                {"role": "tool", "content": "x"},
                {"role": "user", "content": None},
                {"role": "user", "content": "x", "tool_call_id": "c"},
            ),
            LIMITS,
        )
    fields = [".".join(map(str, e.loc)) for e in exc.value.errors]
    assert fields == [
        "body.messages.0.tool_call_id",
        "body.messages.1.content",
        "body.messages.2.tool_call_id",
    ]


def test_oversize_content_names_the_limit() -> None:
    with pytest.raises(PayloadTooLarge) as exc:
        check_messages(msgs({"role": "user", "content": "y" * 51}), LIMITS)
    assert "50" in exc.value.errors[0].msg

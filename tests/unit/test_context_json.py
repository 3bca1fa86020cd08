"""The context route writes ``ContextOut``'s JSON with orjson: the bytes pydantic writes
for the model, for every value a context can hold."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.routes.sessions import context_json, context_model
from app.services.context import BlockSize, Context

# Any text Postgres can hold: every code point but the surrogates (control characters,
# quotes, backslashes, U+2028, non-BMP included).
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)
CALL = st.fixed_dictionaries(
    {
        "id": TEXT,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": TEXT, "arguments": TEXT}),
    }
)
# A stored value outside the schema (a turn written before a field was validated).
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    TEXT,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": TEXT | st.none()},
    optional={
        "name": TEXT,
        "tool_call_id": TEXT,
        "tool_calls": st.lists(CALL, max_size=3),
        "extra": st.dictionaries(TEXT, ODD, max_size=3),
    },
)


def context(messages: list[dict[str, Any]], text: str, n: int, ids: list[int]) -> Context:
    return Context(
        session_id=text[:8],
        user_id=text[-8:],
        state_version=n,
        messages=messages,
        text=text,
        blocks=[BlockSize("task_state", n), BlockSize("recent", n // 2)],
        tokens=n,
        max_tokens=n + 1,
        full_history_tokens=n * 3,
        memory_ids=ids,
    )


@settings(max_examples=400, deadline=None)
@given(
    messages=st.lists(MESSAGE, max_size=5),
    text=TEXT,
    n=st.integers(0, 2**40),
    ids=st.lists(st.integers(1, 2**63 - 1), max_size=4),
)
def test_the_body_is_the_models_json(
    messages: list[dict[str, Any]], text: str, n: int, ids: list[int]
) -> None:
    out = context(messages, text, n, ids)
    assert context_json(out) == context_model(out).model_dump_json().encode()


def test_an_int_orjson_refuses_is_written_by_the_model() -> None:
    out = context([{"role": "tool", "content": "x", "extra": {"n": 2**70}}], "t", 1, [])
    assert b"1180591620717411303424" in context_json(out)
    assert context_json(out) == context_model(out).model_dump_json().encode()

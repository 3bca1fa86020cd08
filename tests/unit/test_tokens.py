from __future__ import annotations

import hashlib
from importlib import resources

from app.core.tokens import (
    CL100K_SHA256,
    count_message_tokens,
    count_tokens,
    encoding,
    truncate_to_tokens,
)


def test_the_bpe_file_ships_in_the_package_and_is_verified() -> None:
    data = resources.files("app.data").joinpath("cl100k_base.tiktoken").read_bytes()
    assert hashlib.sha256(data).hexdigest() == CL100K_SHA256


def test_counts_match_cl100k() -> None:
    # Reference values of tiktoken's cl100k_base.
    assert encoding().encode("hello world") == [15339, 1917]
    assert count_tokens("") == 0
    assert count_tokens(None) == 0
    assert count_tokens("<|endoftext|>") > 1  # special tokens count as plain text


def test_message_tokens_include_tool_calls_and_overhead() -> None:
    plain = count_message_tokens({"role": "user", "content": "hello world"})
    assert plain == 2 + 4
    with_call = count_message_tokens(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "search", "arguments": '{"q": "x"}'}}],
        }
    )
    assert with_call > 8


def test_truncate_to_tokens() -> None:
    text = "word " * 100
    cut = truncate_to_tokens(text, 10)
    assert text.startswith(cut) and count_tokens(cut) <= 10
    assert truncate_to_tokens("short", 10) == "short"
    assert truncate_to_tokens("short", 0) == ""

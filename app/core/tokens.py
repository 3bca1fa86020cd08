"""Offline token counting with tiktoken's cl100k_base.

tiktoken downloads its BPE table on first use; Mnemo runs where nothing may be
downloaded, so the table ships inside the package (``app/data``) and the
encoding is built from it, checked against the same sha256 tiktoken checks.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import tiktoken
from tiktoken.load import load_tiktoken_bpe

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

# The split pattern and special tokens of tiktoken_ext.openai_public.cl100k_base();
# that function cannot be called here because it starts with the download.
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}

# OpenAI's documented accounting for chat messages: every message costs a few
# tokens of framing on top of its content.
MESSAGE_OVERHEAD_TOKENS = 4


_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


def encoding() -> tiktoken.Encoding:
    """The encoding, built once; concurrent first callers wait instead of each building it."""
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                _encoding = _build()
    return _encoding


def _build() -> tiktoken.Encoding:
    path = resources.files("app.data").joinpath("cl100k_base.tiktoken")
    with resources.as_file(path) as local:
        ranks = load_tiktoken_bpe(str(local), expected_hash=CL100K_SHA256)
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_CL100K_SPECIAL,
    )


# Texts counted again and again (a session's rendered state and its tiers, on every
# context read of that session) are counted once: a bounded cache of mid-sized texts.
# Short ones cost less to count than to hash; long ones (a posted tool result) are
# counted once anyway and would only fill the cache.
CACHED_MIN_CHARS = 64
CACHED_MAX_CHARS = 16_384


def count_tokens(text: str | None) -> int:
    """Tokens of plain text; special-token strings count as ordinary text."""
    if not text:
        return 0
    if CACHED_MIN_CHARS <= len(text) <= CACHED_MAX_CHARS:
        return _count_cached(text)
    return len(encoding().encode_ordinary(text))


@functools.lru_cache(maxsize=8192)
def _count_cached(text: str) -> int:
    return len(encoding().encode_ordinary(text))


def count_message_tokens(message: Mapping[str, Any]) -> int:
    """Tokens one OpenAI-format chat message costs in a prompt."""
    total = MESSAGE_OVERHEAD_TOKENS + count_tokens(message.get("content"))
    if message.get("name"):
        total += count_tokens(message["name"])
    if message.get("tool_call_id"):
        total += count_tokens(message["tool_call_id"])
    for call in message.get("tool_calls") or ():
        # Every field a context returns is counted: the call id too (up to 256 chars).
        function = call.get("function") or {}
        total += count_tokens(function.get("name")) + count_tokens(function.get("arguments"))
        total += count_tokens(call.get("id")) + MESSAGE_OVERHEAD_TOKENS
    return total


def count_messages_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    return sum(count_message_tokens(m) for m in messages)


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` that fits in ``max_tokens`` tokens."""
    if max_tokens <= 0:
        return ""
    if CACHED_MIN_CHARS <= len(text) <= CACHED_MAX_CHARS:
        return _truncate_cached(text, max_tokens)  # the same cut on every read
    return _truncate(text, max_tokens)


@functools.lru_cache(maxsize=1024)
def _truncate_cached(text: str, max_tokens: int) -> str:
    return _truncate(text, max_tokens)


def _truncate(text: str, max_tokens: int) -> str:
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    return encoding().decode(tokens[:max_tokens])


def dumps_compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

"""The baselines judged beside Mnemo on the same sessions, without the compressor: the
full history, and truncation to the budget (the newest turns that fit, packed by
``app.context.pack`` so a tool call is never split from its results).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.context.pack import RecentTurn, pack
from app.core.tokens import count_tokens
from bench.recall.judge import Context


def api_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as a chat API sees it (client id and flags dropped)."""
    keep = ("role", "content", "tool_calls", "tool_call_id", "name")
    return {k: message[k] for k in keep if k in message}


def truncated(messages: Sequence[dict[str, Any]], tokens: Sequence[int], budget: int) -> Context:
    """The newest messages that fit the budget, tool calls kept with their results."""
    recent = [
        RecentTurn(message=api_message(m), tokens=t) for m, t in zip(messages, tokens, strict=True)
    ]
    packed = pack(blocks=[], recent=recent, max_tokens=budget, count=count_tokens)
    return Context(state="", messages=packed.messages, tokens=packed.tokens)


def full_history(messages: Sequence[dict[str, Any]], tokens: Sequence[int]) -> Context:
    return Context(state="", messages=[api_message(m) for m in messages], tokens=sum(tokens))

"""What the core knows of a chat model: the one call an extractor makes, and how it fails.

The client that speaks HTTP to an OpenAI-compatible endpoint is an adapter
(``app/providers/llm.py``, ``ChatClient``); the extractors depend on this only.
"""

from __future__ import annotations

from typing import Any, Protocol


class LLMError(Exception):
    """Root of the LLM client errors; ``str(err)`` is a short, loggable reason."""


class LLMUnavailable(LLMError):
    def __init__(self, reason: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class LLMBadResponse(LLMError):
    pass


class Chat(Protocol):
    """A chat model that answers with JSON (``ChatClient`` in production)."""

    model: str

    async def complete_json(
        self, messages: list[dict[str, Any]], *, schema: dict[str, Any] | None
    ) -> str:
        """The assistant's reply to ``messages``; raises ``LLMUnavailable`` or
        ``LLMBadResponse``."""
        ...

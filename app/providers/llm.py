"""A small client for OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, llama.cpp).

The HTTP client is passed in, so tests point it at a local scripted server and the
app shares one connection pool. Transport failures are translated here, once, into
the errors of ``app/core/llm.py``:

LLMError
├── LLMUnavailable   connect error, timeout, HTTP 5xx or 429: worth retrying later
└── LLMBadResponse   HTTP 4xx (not 429), a non-JSON body, or no message content:
                     the request or the server is wrong; retrying will not help

Only the envelope is checked here; whether the content is the JSON the caller
asked for is the caller's business (it can tell the model what was wrong).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from app.core import tracing
from app.core.config import Settings, reveal
from app.core.llm import LLMBadResponse, LLMError, LLMUnavailable

_BODY_SNIPPET = 200


@dataclass
class LLMStats:
    """Counters a metrics endpoint can read; one instance per client."""

    calls: int = 0
    errors: int = 0
    total_ms: float = 0.0

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.calls if self.calls else 0.0


@dataclass
class TokenUsage:
    """Tokens the LLM calls of one piece of work used, as the API reported them."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


# The tally of the work running in this task (one compression job): whoever wants its
# own count sets a fresh TokenUsage; each reply's ``usage`` is added to it. A context
# variable, because one client serves concurrent jobs.
current_usage: ContextVar[TokenUsage | None] = ContextVar("mnemo_llm_usage", default=None)


def _record_usage(data: Any) -> None:
    usage = data.get("usage") if isinstance(data, dict) else None
    reported = {
        name: value
        for name in ("prompt_tokens", "completion_tokens")
        if isinstance(usage, dict)
        and isinstance(value := usage.get(name), int)
        and not isinstance(value, bool)
        and value >= 0
    }
    tracing.annotate(
        {
            "gen_ai.usage.input_tokens": reported.get("prompt_tokens", 0),
            "gen_ai.usage.output_tokens": reported.get("completion_tokens", 0),
        }
    )
    tally = current_usage.get()
    if tally is None:
        return
    tally.calls += 1
    tally.prompt_tokens += reported.get("prompt_tokens", 0)
    tally.completion_tokens += reported.get("completion_tokens", 0)


class ChatClient:
    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout_s: float,
        response_format: Literal["json_object", "json_schema"] = "json_object",
        stats: LLMStats | None = None,
        observe: Callable[[str, float], None] | None = None,
    ) -> None:
        self._http = http
        # Called after every call with its outcome ("ok", "unavailable",
        # "bad_response") and duration in seconds: the metrics hook.
        self._observe = observe
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model = model
        self.timeout_s = timeout_s
        # json_object is understood almost everywhere; json_schema (constrained
        # decoding) only by some servers, so it is opt-in.
        self._response_format = response_format
        self.stats = stats if stats is not None else LLMStats()

    async def complete_json(
        self, messages: list[dict[str, Any]], *, schema: dict[str, Any] | None
    ) -> str:
        """The assistant's reply (``choices[0].message.content``) to ``messages``.

        ``schema`` is sent as a ``json_schema`` response format when the client was
        built with ``response_format="json_schema"``; otherwise the model is only
        asked for a JSON object and the caller puts the schema in the prompt.
        """
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "response_format": self._format(schema),
        }
        started = time.perf_counter()
        self.stats.calls += 1
        outcome = "ok"
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": self.model}
        with tracing.span("llm chat", kind="client", attributes=attributes):
            try:
                return await self._post(body)
            except LLMError as exc:
                self.stats.errors += 1
                outcome = "unavailable" if isinstance(exc, LLMUnavailable) else "bad_response"
                raise
            finally:
                elapsed = time.perf_counter() - started
                self.stats.total_ms += elapsed * 1000
                if self._observe is not None:
                    self._observe(outcome, elapsed)

    def _format(self, schema: dict[str, Any] | None) -> dict[str, Any]:
        if self._response_format == "json_schema" and schema is not None:
            return {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": schema, "strict": False},
            }
        return {"type": "json_object"}

    async def _post(self, body: dict[str, Any]) -> str:
        try:
            # httpx timeouts are per phase (connect, each read…); the deadline
            # bounds the whole call, so a server trickling bytes cannot stall a job.
            async with asyncio.timeout(self.timeout_s):
                response = await self._http.post(
                    self._url, json=body, headers=self._headers, timeout=self.timeout_s
                )
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise LLMUnavailable(f"timeout ({self.timeout_s:g}s)") from exc
        except httpx.TransportError as exc:
            raise LLMUnavailable(f"connect error: {type(exc).__name__}") from exc
        _raise_for_status(response)
        return _content(response)


def _raise_for_status(response: httpx.Response) -> None:
    status = response.status_code
    if status < 400:
        return
    reason = f"http {status}"
    if status == 429 or status >= 500:
        raise LLMUnavailable(reason, retry_after_s=_retry_after(response))
    snippet = " ".join(response.text.split())[:_BODY_SNIPPET]
    raise LLMBadResponse(f"{reason}: {snippet}" if snippet else reason)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None  # absent, or an HTTP date: use our own backoff


def _content(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError as exc:
        raise LLMBadResponse("response body is not JSON") from exc
    _record_usage(data)  # billed even when the content is unusable
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise LLMBadResponse("response has no choices[0].message.content") from exc
    if not isinstance(content, str):
        raise LLMBadResponse("choices[0].message.content is not a string")
    return content


def chat_client_from_settings(
    settings: Settings,
    http: httpx.AsyncClient,
    observe: Callable[[str, float], None] | None = None,
) -> ChatClient | None:
    """The configured client, or None when no LLM is configured (rules only)."""
    if not settings.llm_base_url:
        return None
    return ChatClient(
        http,
        base_url=settings.llm_base_url,
        api_key=reveal(settings.llm_api_key),
        model=settings.llm_model,
        timeout_s=settings.llm_timeout_s,
        observe=observe,
    )

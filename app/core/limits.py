"""Field limits shared by the API schema and the task-state models.

Ingest and the state must agree: a tool name ingest accepts is one the state can
record, or the first compression of that turn fails, and every later one with it.
"""

from __future__ import annotations

# Names and ids a client chooses for tool calls and functions (OpenAI allows 64).
NAME_CHARS = 256
# Tool calls in one assistant message (OpenAI allows 128 tools per request).
MAX_TOOL_CALLS = 128
# JSON nesting (in `metadata` and in `function.arguments`): deeper is refused at
# ingest, so no later walker (the extractor, the JSONB encoder) can overflow the stack.
JSON_DEPTH = 64
# `metadata` of a message or a memory, as JSON.
MAX_METADATA_BYTES = 16 * 1024

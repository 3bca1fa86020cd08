"""An OpenAI Agents SDK ``Session`` kept by Mnemo: the history the runner reads is the
session's ``/context`` (task state, memories and recent turns within a budget), the
items it adds go to ``/turns``, ``pop_item`` is ``DELETE …/turns/last``.

    pip install './clients/python[openai-agents]'

    session = MnemoSession("s-1", user_id="u-42", client=AsyncClient(url, api_key=key))
    result = await Runner.run(agent, "Book me a flight to Lisbon.", session=session)

Items are stored as Mnemo turns, so they come back in the form the context holds them:
messages as ``{"role", "content"}`` (text parts joined), a function call as a
``function_call`` item (``call_id``, ``name``, ``arguments``), its result as a
``function_call_output``. Response-only fields (``id``, ``status``, annotations) are not
kept. Item types Mnemo does not store (reasoning, hosted tool calls) are left out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from mnemo_client._core import MnemoError
from mnemo_client.client import AsyncClient

if TYPE_CHECKING:
    from agents import SessionSettings, TResponseInputItem

log = logging.getLogger(__name__)

# The id the SDK gives every item made from a Chat Completions answer: not an identity
# (as a Mnemo message id, the second such item would be taken for a resend of the first).
FAKE_ID = "__fake_id__"
STORED_TYPES = frozenset({"message", "function_call", "function_call_output"})
MESSAGE_FIELDS = ("type", "role", "content", "id")
CALL_FIELDS = ("type", "call_id", "name", "arguments", "id")
OUTPUT_FIELDS = ("type", "call_id", "output", "id")


def to_mnemo(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The items Mnemo stores, as it accepts them (Responses items, chat messages)."""
    fields = {"message": MESSAGE_FIELDS, "function_call": CALL_FIELDS}
    kept: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message" if "role" in item else None)
        if kind not in STORED_TYPES:
            log.debug("not stored in Mnemo: a %r item", kind)
            continue
        wanted = fields.get(str(kind), OUTPUT_FIELDS)
        out = {k: v for k, v in item.items() if k in wanted and v is not None}
        if out.get("id") == FAKE_ID:
            del out["id"]
        kept.append(out)
    return kept


def to_items(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions messages (a context, a turn) as Responses input items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role, content = m["role"], m.get("content")
        if role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": content}
            )
            continue
        if content is not None:
            items.append({"role": role, "content": content})
        for call in m.get("tool_calls") or ():
            function = call["function"]
            items.append(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": function["name"],
                    "arguments": function["arguments"],
                }
            )
    return items


class MnemoSession:
    """A ``agents.memory.Session`` (the protocol) over Mnemo, for ``Runner.run(…,
    session=…)``. ``max_tokens`` bounds the context ``get_items`` reads."""

    def __init__(
        self,
        session_id: str,
        *,
        user_id: str,
        client: AsyncClient,
        max_tokens: int | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.client = client
        self.max_tokens = max_tokens
        self.session_settings = session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's context as items, oldest first (the latest ``limit`` of them)."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        try:
            context = await self.client.get_context(self.session_id, max_tokens=self.max_tokens)
        except MnemoError as error:
            if error.status == 404:  # nothing added yet
                return []
            raise
        items = to_items(context["messages"])
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        stored = to_mnemo(cast("list[Mapping[str, Any]]", items))
        if stored:
            await self.client.post_turns(self.session_id, self.user_id, stored)  # type: ignore[arg-type]

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item; None when there is none.

        A Mnemo turn can hold several items (parallel function calls are one assistant
        turn): the turn is popped and all but its last item are added back. A turn
        already compacted into the task state cannot be popped: ``MnemoError`` 409.
        """
        try:
            popped = await self.client.pop_turn(self.session_id)
        except MnemoError as error:
            if error.status == 404:  # no session, or no turn left
                return None
            raise
        items = to_items([cast("Mapping[str, Any]", popped["turn"])])
        if not items:
            return None
        if len(items) > 1:
            await self.client.post_turns(self.session_id, self.user_id, items[:-1])  # type: ignore[arg-type]
        return cast("TResponseInputItem", items[-1])

    async def clear_session(self) -> None:
        try:
            await self.client.delete_session(self.session_id)
        except MnemoError as error:
            if error.status != 404:
                raise

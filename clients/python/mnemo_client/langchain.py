"""LangChain chat history kept by Mnemo: messages come from ``/context`` (the task
state, memories and recent turns within a budget), new ones go to ``/turns``.

    pip install './clients/python[langchain]'

    history = MnemoChatMessageHistory(Client(url, key), session_id="s-1", user_id="u-42")
    RunnableWithMessageHistory(chain, lambda sid: history, ...)

Pass an ``AsyncClient`` as ``aclient`` to use the async methods without threads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, convert_to_messages, convert_to_openai_messages

from mnemo_client._core import MnemoError
from mnemo_client.client import AsyncClient, Client

ID = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")


def to_mnemo(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Chat Completions messages; a LangChain message id becomes the Mnemo id if valid."""
    converted: list[dict[str, Any]] = convert_to_openai_messages(list(messages))
    for original, message in zip(messages, converted, strict=True):
        if original.id and ID.match(original.id):
            message["id"] = original.id
    return converted


class MnemoChatMessageHistory(BaseChatMessageHistory):
    def __init__(
        self,
        client: Client,
        *,
        session_id: str,
        user_id: str,
        max_tokens: int | None = None,
        aclient: AsyncClient | None = None,
    ) -> None:
        self.client = client
        self.aclient = aclient
        self.session_id = session_id
        self.user_id = user_id
        self.max_tokens = max_tokens

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        try:
            context = self.client.get_context(self.session_id, max_tokens=self.max_tokens)
        except MnemoError as error:
            if error.status == 404:  # nothing posted yet
                return []
            raise
        return convert_to_messages(context["messages"])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            self.client.post_turns(self.session_id, self.user_id, to_mnemo(messages))  # type: ignore[arg-type]

    def clear(self) -> None:
        try:
            self.client.delete_session(self.session_id)
        except MnemoError as error:
            if error.status != 404:
                raise

    async def aget_messages(self) -> list[BaseMessage]:
        if self.aclient is None:
            return await super().aget_messages()
        try:
            context = await self.aclient.get_context(self.session_id, max_tokens=self.max_tokens)
        except MnemoError as error:
            if error.status == 404:
                return []
            raise
        return convert_to_messages(context["messages"])

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if self.aclient is None:
            return await super().aadd_messages(messages)
        if messages:
            await self.aclient.post_turns(self.session_id, self.user_id, to_mnemo(messages))  # type: ignore[arg-type]
        return None

"""The extractor contract: turns in, cognitive units out.

Extractors never touch the state; they only read it (for context such as the
current goal or which confirmation is open) and return units. Merging is the
single place where the state changes, so a rule extractor and an LLM extractor
are interchangeable and can even be combined.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from app.compression.state import TaskState, Unit
from app.core.turns import TurnView


@runtime_checkable
class Extractor(Protocol):
    name: str

    async def extract(self, turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
        """Units found in ``turns`` (oldest first); must not mutate ``state``."""
        ...


# The answer recorded for an agent question the conversation moved past without
# answering: it is no longer pending, and the renderer does not show it.
MOVED_ON = {"en": "(not answered; the conversation moved on)", "zh": "（未答复，对话已继续）"}

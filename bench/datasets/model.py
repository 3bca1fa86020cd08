"""The dataset-neutral shape of a long-term-memory benchmark.

A ``Dataset`` is users, each with sessions of turns, and questions about one
user's history. Every id that reaches Mnemo (user, session, message) is built
here or in a loader, and carries no label: the evidence lives only in
``Question`` and in the private ``session_labels`` mapping.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

# Mnemo's id alphabet (API.md): 1–128 chars of [A-Za-z0-9._:@-].
_NOT_ID = re.compile(r"[^A-Za-z0-9.:@-]+")


def api_id(*parts: str) -> str:
    """Join ``parts`` with '-' into a valid Mnemo id (other characters become '-')."""
    joined = "-".join(_NOT_ID.sub("-", p).strip("-") for p in parts if p)
    if not joined or len(joined) > 128:
        raise ValueError(f"cannot build an id from {parts!r}")
    return joined


@dataclass(frozen=True)
class Turn:
    dataset_id: str  # the turn's id in the dataset ("D3:7"), or one we assigned ("S12:3")
    role: str  # "user" | "assistant"
    content: str
    created_at: str  # RFC 3339
    name: str | None = None  # the speaker, when the dataset names one


@dataclass(frozen=True)
class Session:
    session_id: str  # the Mnemo session id
    date: str  # RFC 3339, the session's start
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class User:
    user_id: str  # the Mnemo user id
    sessions: tuple[Session, ...]

    def turns(self) -> Iterator[tuple[Session, Turn]]:
        for session in self.sessions:
            for turn in session.turns:
                yield session, turn


@dataclass(frozen=True)
class Question:
    question_id: str
    user_id: str
    question: str
    answer: str | None  # None: no answer string (LoCoMo adversarial)
    category: str
    evidence_turns: frozenset[str]  # dataset ids of the turns holding the answer
    evidence_sessions: frozenset[str]  # Mnemo session ids holding the answer
    scored: bool = True  # False: excluded from retrieval scoring (e.g. abstention)


@dataclass
class Dataset:
    name: str
    users: list[User]
    questions: list[Question]
    # Mnemo session id -> the dataset's own session id; never sent to the service.
    session_labels: dict[str, str] = field(default_factory=dict)
    category_names: dict[str, str] = field(default_factory=dict)

    @property
    def turn_count(self) -> int:
        return sum(len(s.turns) for u in self.users for s in u.sessions)

    @property
    def session_count(self) -> int:
        return sum(len(u.sessions) for u in self.users)

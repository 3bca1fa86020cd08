"""The literal prefilters must never hide a sentence from its family pattern."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.compression.extract import patterns as P
from app.compression.extract.rules import split_sentences

from . import test_extract_rules, test_session

_PAIRS = [
    (P.HINT_CONSTRAINT, P.CONSTRAINT),
    (P.HINT_GOAL, P.GOAL_EXPLICIT),
    (P.HINT_PREFERENCE, P.PREFERENCE),
    (P.HINT_TODO, P.TODO),
    (P.HINT_PREREQUISITE, P.PREREQUISITE),
    (P.HINT_DECISION, P.DECISION),
    (P.HINT_USER_PENDING, P.USER_PENDING),
    (P.HINT_TODO_DONE, P.TODO_DONE),
    (P.HINT_BLOCKER, P.BLOCKER),
    (P.HINT_REVOKE, P.REVOKE),
    (P.HINT_CHITCHAT, P.CHITCHAT),
    *((P.HINT_HIGH_STAKES, pattern) for _, pattern in P.HIGH_STAKES),
    *(
        (P.HINT_PARAMETER, p)
        for p in (
            P.ZH_SET,
            P.EN_SET,
            P.EN_SHOULD_BE,
            P.EN_USE_AS,
            P.INSTEAD_OF,
            P.ASSIGN,
            P.COLON_PAIR,
        )
    ),
]


def _corpus() -> list[str]:
    """Every string literal in the extraction and session tests, split into sentences."""
    texts: set[str] = set()
    for module in (test_extract_rules, test_session):
        source = Path(str(module.__file__)).read_text(encoding="utf-8")
        texts.update(re.findall(r'"((?:[^"\\\n]|\\.){3,})"', source))
    extra = [
        "I'd rather not",
        "It is OK to skip the gym now",
        "Budget: $800",
        "x = 3",
        "请勿吸烟",
        "千万别忘了",
        "we'll use redis",
        "The gym is not a requirement anymore",
    ]
    sentences = {s for t in [*texts, *extra] for s in split_sentences(t)}
    return sorted(sentences)


CORPUS = _corpus()


def test_corpus_is_substantial() -> None:
    assert len(CORPUS) > 300


@pytest.mark.parametrize(("hint", "pattern"), _PAIRS)
def test_hints_are_supersets_of_their_family(
    hint: re.Pattern[str], pattern: re.Pattern[str]
) -> None:
    hidden = [s for s in CORPUS if pattern.search(s) and not hint.search(s.lower())]
    assert hidden == []

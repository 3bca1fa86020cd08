"""The literal prefilters must never hide a sentence from its family pattern."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.compression.extract import changes, deferral, patterns
from app.compression.extract.rules import split_sentences

from . import (
    test_changes,
    test_deferral,
    test_extract_noise,
    test_extract_rules,
    test_identifiers_summary,
    test_pending,
    test_session,
)

_PAIRS = [
    (patterns.HINT_CONSTRAINT, patterns.CONSTRAINT),
    (patterns.HINT_GOAL, patterns.GOAL_EXPLICIT),
    (patterns.HINT_PREFERENCE, patterns.PREFERENCE),
    (patterns.HINT_TODO, patterns.TODO),
    (patterns.HINT_PREREQUISITE, patterns.PREREQUISITE),
    (patterns.HINT_DECISION, patterns.DECISION),
    (patterns.HINT_USER_PENDING, patterns.USER_PENDING),
    (patterns.HINT_PROPOSAL, patterns.PROPOSAL),
    (patterns.HINT_TODO_DONE, patterns.TODO_DONE),
    (patterns.HINT_BLOCKER, patterns.BLOCKER),
    (patterns.HINT_REVOKE, patterns.REVOKE),
    (patterns.HINT_CHITCHAT, patterns.CHITCHAT),
    (patterns.HINT_EMPHASIS, patterns.EMPHASIS),
    (deferral.HINT_DEFERRAL, deferral.DEFERRAL),
    (changes.HINT_CHANGE, changes.CHANGE_CUE),
    (changes.HINT_EN_REVERSAL, changes.EN_CUE),
    (changes.HINT_ZH_REVERSAL, changes.ZH_CUE),
    *((patterns.HINT_HIGH_STAKES, pattern) for _, pattern in patterns.HIGH_STAKES),
    *(
        (patterns.HINT_PARAMETER, p)
        for p in (
            patterns.ZH_SET,
            patterns.EN_SET,
            patterns.EN_SHOULD_BE,
            patterns.EN_USE_AS,
            patterns.INSTEAD_OF,
            patterns.ASSIGN,
            patterns.COLON_PAIR,
        )
    ),
]


def _corpus() -> list[str]:
    """Every string literal in the extraction and session tests, split into sentences."""
    texts: set[str] = set()
    modules = (
        test_extract_rules,
        test_session,
        test_deferral,
        test_changes,
        test_extract_noise,
        test_identifiers_summary,
        test_pending,
    )
    for module in modules:
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

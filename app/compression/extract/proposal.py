"""Questions, and the questions that propose: "should we raise X to 15?", "要不要把X改成
15？" weigh a value or a change; they do not set it. The sentence rules and the change
rules both ask, so it stands apart from either."""

from __future__ import annotations

from app.compression.extract import patterns
from app.compression.extract.gates import LEXICON


def is_question(sentence: str) -> bool:
    # Same as patterns.QUESTION_END, without scanning the sentence for an end anchor.
    text = sentence.rstrip()
    return text.endswith(("?", "？")) or text.rstrip("。. ").endswith(("吗", "呢", "么"))


def proposes(sentence: str) -> bool:
    """A question that weighs a value or a change ("should we raise X to 15?",
    "要不要把X改成15？"): it proposes, it does not set. A polite request phrased as a
    question ("can you set X to 15?", "能不能把X改成15？") does set."""
    return (
        is_question(sentence)
        and patterns.HINT_PROPOSAL.occurs(LEXICON.lower(sentence))
        and patterns.PROPOSAL.search(sentence) is not None
        and patterns.REQUEST.search(sentence) is None
    )

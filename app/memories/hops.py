"""Multi-hop retrieval: the terms a second search round is seeded with.

A question whose answer is spread over turns ("Where did she move from?": one turn
names the country, another says she moved) finds the first turn by its words; the
turns about the same thing share its *names*, not the question's words. So the
second round searches for the question plus the names that the best hits of the
first round carry and the question does not.

Names are found by their shape, in any Latin-script language: a capitalised word
that does not start a sentence, or a number of two or more digits. The speaker
prefix of a turn ("Caroline: …") is left out: a conversation's speakers are in
every turn and seed nothing. Scripts without case (Chinese) give no names here;
their second round is the first one again, so it is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.memories.bm25 import search_terms

# A capitalised word (not all caps: acronyms start sentences too) or a 2+ digit number.
_NAME = re.compile(r"\b(?:[A-Z][a-z][\w'’-]*|\d{2,})\b")
# Where a sentence starts: after . ! ? … or a line break, or at the text's start.
_SENTENCE_START = re.compile(r"(?:^|[.!?…:;\n]\s*|[\"“(]\s*)$")
# A speaker prefix "Name: " at the start of a turn row.
_SPEAKER = re.compile(r"^[^:\n]{1,40}:\s")


def names(text: str) -> list[str]:
    """The names in ``text`` (a turn row: its speaker prefix is skipped), in order."""
    body = _SPEAKER.sub("", text, count=1)
    out: list[str] = []
    for m in _NAME.finditer(body):
        if m.group()[0].isalpha() and _SENTENCE_START.search(body[: m.start()]):
            continue
        out.append(m.group())
    return out


def seed_terms(query: str, hits: Sequence[str], *, limit: int) -> list[str]:
    """Search terms for the second round: names from ``hits`` (best first) that the
    query lacks, a name from a better hit first, at most ``limit`` of them."""
    asked = set(search_terms(query))
    speakers = {m.group().rstrip(": \n").lower() for h in hits if (m := _SPEAKER.match(h))}
    seeds: list[str] = []
    for hit in hits:
        for name in names(hit):
            if name.lower() in speakers:
                continue
            for term in search_terms(name):
                if term not in asked and term not in seeds:
                    seeds.append(term)
        if len(seeds) >= limit:
            break
    return seeds[:limit]

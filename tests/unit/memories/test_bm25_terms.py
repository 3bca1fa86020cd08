"""Stemmed terms with repeats, for the BM25 postings."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.memories.bm25 import index_terms, search_terms, stem


@pytest.mark.parametrize(
    "words",
    [
        ("painting", "paintings", "painted", "paint"),
        ("hike", "hiking", "hikes", "hiked"),
        ("camp", "camping", "camped"),
        ("city", "cities"),
        ("try", "tried", "tries"),
        ("run", "running"),
        ("class", "classes"),
    ],
)
def test_inflections_share_a_stem(words: tuple[str, ...]) -> None:
    assert len({stem(w) for w in words}) == 1


def test_ids_numbers_and_chinese_are_left_alone() -> None:
    assert stem("qx7t2l") == "qx7t2l" and stem("2023") == "2023" and stem("过敏") == "过敏"
    assert stem("bus") == "bus" and stem("is") == "is"


def test_index_terms_keep_repeats_and_search_terms_do_not() -> None:
    terms = index_terms("Tomatoes, more tomatoes; order-123 我对花生过敏")
    assert terms.count("tomato") == 2
    assert {"order-123", "order", "123", "花生", "过敏"} <= set(terms)
    query = search_terms("tomatoes and tomatoes")
    assert query == ["tomato"]


def test_term_matcher_counts_the_query_terms_a_text_has() -> None:
    from app.memories.bm25 import term_matcher

    count = term_matcher(search_terms("Which paintings did the twins sell in 上周, order K7-22?"))
    # paint, twin, 上周 and the id (whole, and its parts k7 and 22); not sell, not order
    assert count("Painting sold well; the twins were happy. 上周 K7-22 shipped.") == 6
    assert count("Nothing relevant here at all.") == 0
    # A stem counts once however often it occurs, and only where it starts a word.
    assert count("repainting, repaint, unpainted") == 0
    assert count("paint paint paintings") == 1


def _counted_with_word_boundary(terms: list[str], text: str) -> int:
    """term_matcher's contract, spelled with re's \\b: the distinct plain words found
    where a word starts, and the other terms found anywhere."""
    words = [t for t in terms if re.fullmatch("[a-z]+", t)]
    others = [t for t in terms if not re.fullmatch("[a-z]+", t)]
    folded = text.lower()
    found = set(re.findall(r"\b(?:" + "|".join(map(re.escape, words)) + ")", folded))
    return (len(found) if words else 0) + sum(1 for t in others if t in folded)


@given(
    terms=st.lists(
        st.one_of(st.text("abn", min_size=1, max_size=3), st.sampled_from(["a_b", "k7", "上周"])),
        max_size=5,
        unique=True,
    ),
    text=st.text("abn AB_7é上周İ-\n", max_size=40),
)
def test_term_matcher_counts_a_word_only_where_a_word_starts(terms: list[str], text: str) -> None:
    # Terms that start one another ("a", "ab") and letters after a digit, an underscore,
    # a non-ASCII letter or at the very start: the boundary as re's \b draws it.
    from app.memories.bm25 import term_matcher

    assert term_matcher(terms)(text) == _counted_with_word_boundary(terms, text)


def _counted_by_the_first_matcher(terms: list[str], text: str) -> int:
    """term_matcher as it was first written (one regex pass without \\b, each match
    kept where a word starts): the counts any faster matcher must give."""
    words = [t for t in terms if re.fullmatch("[a-z]+", t)]
    others = [t for t in terms if not re.fullmatch("[a-z]+", t)]
    folded = text.lower()
    found: set[str] = set()
    if words:
        for m in re.finditer("|".join(map(re.escape, words)), folded):
            before = folded[m.start() - 1] if m.start() else " "
            if not (before.isalnum() or before == "_"):
                found.add(m.group())
    return len(found) + sum(1 for t in others if t in folded)


_PIECES = [
    "Painting", "paint", "painter's", "repaint", "pain", "9paint", "_paint", "Paint-ed",
    "hik", "hiking", "hike", "éhike", "art", "start", "artist", "上周", "上周末", "花生过敏",
    "k7-22", "K7", "22", "ship", "shipment", "İpaint", "ß",
]  # fmt: skip
_TERMS = [
    "paint", "pain", "painter", "hik", "art", "artist", "ship", "上周", "过敏", "k7-22", "k7",
    "22", "a", "p",
]  # fmt: skip


@given(
    terms=st.lists(st.sampled_from(_TERMS), max_size=8, unique=True),
    pieces=st.lists(
        st.tuples(st.sampled_from(_PIECES), st.sampled_from(["", " ", ", ", "\n", "-", "。"])),
        max_size=12,
    ),
)
def test_term_matcher_counts_what_the_first_matcher_counted(
    terms: list[str], pieces: list[tuple[str, str]]
) -> None:
    # English and Chinese turns; stems that start one another ("pain", "paint", "painter"),
    # or not; stems inside words, after digits, underscores and non-ASCII letters.
    from app.memories.bm25 import term_matcher

    text = "".join(piece + gap for piece, gap in pieces)
    count = term_matcher(terms)
    assert count(text) == _counted_by_the_first_matcher(terms, text)
    assert count(text) == _counted_by_the_first_matcher(terms, text)  # kept, the same


def test_a_matcher_counts_the_same_in_any_order_of_texts() -> None:
    from app.memories.bm25 import term_matcher

    terms = search_terms("paintings of the lake at dawn")
    texts = [f"user: turn {i} painted the lake" if i % 3 else f"turn {i}" for i in range(600)]
    first = [term_matcher(terms)(t) for t in texts]
    again = [term_matcher(terms)(t) for t in reversed(texts)]
    assert first == list(reversed(again))
    assert first[:3] == [0, 2, 2]

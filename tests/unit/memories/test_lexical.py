"""Lexical terms for zh/en memory search."""

from __future__ import annotations

import math

import pytest

from app.memories.lexical import idf, lexical_similarity, lexical_terms, overlap_score, query_terms


def test_english_words_are_folded_and_stopwords_dropped() -> None:
    assert lexical_terms("The user PREFERS an Aisle seat!") == ["user", "prefers", "aisle", "seat"]


def test_identifiers_numbers_and_emails_survive_whole() -> None:
    terms = lexical_terms("Booking QX7T2L for order-123 costs 3.5 EUR, mail Bob.Smith@Example.com")
    assert {"qx7t2l", "order-123", "3.5", "eur", "bob.smith@example.com"} <= set(terms)
    # Compound ids also yield their parts, so "order 123" meets "order-123".
    assert {"order", "123"} <= set(terms)
    assert "3" not in terms and "5" not in terms


def test_full_width_forms_are_normalised() -> None:
    assert lexical_terms("ＱＸ７Ｔ２Ｌ") == ["qx7t2l"]


def test_chinese_becomes_bigrams_without_function_words() -> None:
    assert lexical_terms("我的座位偏好是靠窗") == ["座位", "位偏", "偏好", "靠窗"]
    assert lexical_terms("我对花生过敏") == ["花生", "生过", "过敏"]


def test_single_cjk_characters_are_unigrams() -> None:
    assert lexical_terms("辣") == ["辣"]
    assert lexical_terms("我的猫") == ["猫"]


def test_negation_is_kept_in_chinese() -> None:
    assert "不吃" in lexical_terms("我不吃辣")


def test_mixed_chinese_and_english() -> None:
    terms = lexical_terms("帮我查一下订单 ORDER-9 的 PNR QX7T2L，谢谢")
    assert {"订单", "order-9", "pnr", "qx7t2l", "谢谢"} <= set(terms)
    assert "的" not in terms
    assert len(terms) == len(set(terms))


def test_empty_and_punctuation_only() -> None:
    assert lexical_terms("") == []
    assert lexical_terms("？！…, the") == []


def test_query_terms_are_capped() -> None:
    text = " ".join(f"word{i}" for i in range(100))
    assert query_terms(text, max_terms=5) == [f"word{i}" for i in range(5)]


def test_overlap_score_counts_shared_terms() -> None:
    query = lexical_terms("aisle seat preference")
    assert overlap_score(query, lexical_terms("Seat preference: aisle")) == 1.0
    assert overlap_score(query, lexical_terms("window seat")) == pytest.approx(1 / 3)
    assert overlap_score(query, []) == 0.0
    assert overlap_score([], ["x"]) == 0.0


def test_overlap_score_weights_rare_terms_by_idf() -> None:
    weights = idf({"seat": 90, "aisle": 2}, n_docs=100)
    assert weights["aisle"] > weights["seat"] > 0
    query = ["seat", "aisle"]
    assert overlap_score(query, ["aisle"], weights) > overlap_score(query, ["seat"], weights)
    assert math.isclose(
        overlap_score(query, ["aisle"], weights) + overlap_score(query, ["seat"], weights), 1.0
    )


def test_lexical_similarity() -> None:
    assert lexical_similarity("我对花生过敏", "我对花生过敏。") == 1.0
    assert lexical_similarity("aisle seat", "peanut allergy") == 0.0

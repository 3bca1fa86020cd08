"""The retrieval gate and query expansion, as tables."""

from __future__ import annotations

import pytest

from app.memories.gate import build_query, is_referential, needs_retrieval


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        "ok",
        "OK!",
        "okay",
        "okkk",
        "k",
        "thanks",
        "Thank you!!",
        "thx",
        "lol",
        "haha",
        "got it",
        "ok thanks",
        "cool, thanks 🙏",
        "👍",
        "👍🏻",
        "🙂🙂",
        "?",
        "好的",
        "好",
        "好的，谢谢！",
        "谢谢",
        "谢谢你",
        "嗯",
        "嗯嗯",
        "哈哈哈哈",
        "收到",
        "明白了",
        "没问题",
        "好的👍",
    ],
)
def test_acknowledgements_skip_retrieval(query: str) -> None:
    assert needs_retrieval(query) is False


@pytest.mark.parametrize(
    "query",
    [
        "what seat do I prefer?",
        "now",
        "okinawa trip",
        "no nuts please, I'm allergic",
        "ok, what about my allergy?",
        "3",
        "QX7T2L",
        "我对花生过敏吗",
        "好的，那帮我订靠窗的座位",
        "谢谢，顺便查一下订单",
        "那这个呢",
        "它呢",
        "and the other?",
    ],
)
def test_real_questions_retrieve(query: str) -> None:
    assert needs_retrieval(query) is True


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("那这个呢", True),
        ("它呢", True),
        ("what about that one?", True),
        ("and the other?", True),
        ("what seat do I prefer on long flights", False),
        ("我对花生过敏吗", False),
    ],
)
def test_referential(query: str, expected: bool) -> None:
    assert is_referential(query) is expected


RECENT = ["我想订去北京的机票", "有两个航班：CA123 和 MU456", "CA123 是早上的"]


def test_referential_query_is_expanded_most_recent_first() -> None:
    assert (
        build_query("那这个呢", RECENT)
        == "那这个呢\nCA123 是早上的\n有两个航班：CA123 和 MU456\n我想订去北京的机票"
    )


def test_english_referential_query_is_expanded() -> None:
    recent = ["Find me a hotel in Lisbon", "Hotel Avenida has a pool, Hotel Sol does not"]
    query = build_query("and the other?", recent)
    assert query.splitlines() == ["and the other?", recent[1], recent[0]]


def test_short_query_is_expanded_even_without_a_referent() -> None:
    assert build_query("seat?", ["Book my flight to Oslo"]) == "seat?\nBook my flight to Oslo"


def test_self_contained_query_is_left_alone() -> None:
    query = "What seat do I usually prefer on long flights?"
    assert build_query(query, RECENT) == query
    assert build_query("我对花生过敏吗", RECENT) == "我对花生过敏吗"


def test_expansion_is_bounded() -> None:
    recent = ["x" * 500] * 10
    query = build_query("it?", recent, max_chars=300, per_turn_chars=100)
    assert len(query) <= 300
    assert query.startswith("it?\n" + "x" * 100)


def test_expansion_with_no_history() -> None:
    assert build_query("那这个呢", []) == "那这个呢"
    assert build_query("  ", ["hello there"]) == "hello there"

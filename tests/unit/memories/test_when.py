"""Dates as people write them, and relative expressions resolved against a turn's date."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from app.memories.when import date_label, human_date, resolve_relative

MONDAY = date(2023, 5, 8)


def test_human_dates_en_and_zh() -> None:
    assert human_date(date(2023, 5, 7)) == "7 May 2023"
    assert human_date(date(2023, 5, 7), "zh") == "2023年5月7日"
    assert date_label(date(2023, 5, 7)) == "7 May 2023 (2023-05-07)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went yesterday.", "I went yesterday (7 May 2023)."),
        ("Last night was fun", "Last night (7 May 2023) was fun"),
        ("the day before yesterday", "the day before yesterday (6 May 2023)"),
        ("See you tomorrow", "See you tomorrow (9 May 2023)"),
        ("It opened 3 days ago", "It opened 3 days ago (5 May 2023)"),
        ("two weeks ago", "two weeks ago (week of 24 April 2023)"),
        ("last week", "last week (week of 1 May 2023)"),
        ("last Friday", "last Friday (5 May 2023)"),
        ("next monday", "next monday (15 May 2023)"),
        ("last weekend", "last weekend (weekend of 6 May 2023)"),
        ("last month", "last month (April 2023)"),
        ("a year ago", "a year ago (2022)"),
        ("last year", "last year (2022)"),
        ("Nothing relative here, not even weekly.", "Nothing relative here, not even weekly."),
    ],
)
def test_english_relative_expressions(text: str, expected: str) -> None:
    assert resolve_relative(text, MONDAY) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我昨天去了", "我昨天（2023年5月7日）去了"),
        ("前天下雨", "前天（2023年5月6日）下雨"),
        ("上周开会", "上周（2023年5月1日那周）开会"),
        ("三天前到的", "三天前（2023年5月5日）到的"),
        ("上个月搬家", "上个月（2023年4月）搬家"),
        ("去年夏天", "去年（2022年）夏天"),
    ],
)
def test_chinese_relative_expressions(text: str, expected: str) -> None:
    assert resolve_relative(text, MONDAY) == expected


def test_no_date_or_no_text_changes_nothing() -> None:
    assert resolve_relative("yesterday", None) == "yesterday"
    assert resolve_relative("", datetime(2023, 5, 8, tzinfo=UTC)) == ""
    # A datetime is read as its day.
    assert resolve_relative("today", datetime(2023, 5, 8, 23, 0, tzinfo=UTC)) == (
        "today (8 May 2023)"
    )

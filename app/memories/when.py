"""Dates for long-term memory: how people write them, and relative expressions resolved.

A turn posted on 7 May 2023 that says "yesterday" means 6 May 2023; a question
asked a year later ("when did …?") can only be answered if the indexed text says
so. ``resolve_relative`` appends the absolute date after each relative
expression it recognises — in English and Chinese, by families of phrasing
(day offsets, named weekdays, week/month/year offsets, "N units ago") — and
leaves everything else alone. It never rewrites the archive: only the text that
is indexed and shown as memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, timedelta

MONTHS = (
    "January February March April May June July August September October November December"
).split()
WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a couple of": 2,
    "a few": 3,
    "few": 3,
}
_ZH_DIGITS = {c: i for i, c in enumerate("一二三四五六七八九", start=1)} | {"两": 2}


def human_date(day: date, language: str = "en") -> str:
    """``7 May 2023`` / ``2023年5月7日``."""
    if language == "zh":
        return f"{day.year}年{day.month}月{day.day}日"
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def date_label(day: date, language: str = "en") -> str:
    """The way people write it, beside ISO: ``7 May 2023 (2023-05-07)``."""
    return f"{human_date(day, language)} ({day.isoformat()})"


def _month(day: date, offset: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + offset
    return index // 12, index % 12 + 1


def _month_label(day: date, offset: int, language: str) -> str:
    year, month = _month(day, offset)
    return f"{year}年{month}月" if language == "zh" else f"{MONTHS[month - 1]} {year}"


def _week_label(day: date, offset_weeks: int, language: str) -> str:
    monday = day - timedelta(days=day.weekday()) + timedelta(weeks=offset_weeks)
    if language == "zh":
        return f"{human_date(monday, 'zh')}那周"
    return f"week of {human_date(monday)}"


def _year_label(day: date, offset: int, language: str) -> str:
    return f"{day.year + offset}年" if language == "zh" else str(day.year + offset)


def _count(text: str) -> int | None:
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    if text in _NUMBER_WORDS:
        return _NUMBER_WORDS[text]
    if text in _ZH_DIGITS:
        return _ZH_DIGITS[text]
    if text == "十":
        return 10
    return None


def _weekday_before(day: date, weekday: int) -> date:
    back = (day.weekday() - weekday) % 7 or 7
    return day - timedelta(days=back)


def _weekday_after(day: date, weekday: int) -> date:
    ahead = (weekday - day.weekday()) % 7 or 7
    return day + timedelta(days=ahead)


_EN_UNITS = r"(?P<unit>day|week|month|year)s?"
_EN_COUNT = r"(?P<n>\d{1,2}|an?|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few)"
_WEEKDAY = "(?P<weekday>" + "|".join(WEEKDAYS) + ")"

# Each rule: a pattern (matched case-insensitively) and a function of the match and
# the turn's day giving the label, or None to leave that match alone.
Rule = tuple[re.Pattern[str], Callable[[re.Match[str], date], str | None]]


def _ago(m: re.Match[str], day: date, language: str = "en") -> str | None:
    n = _count(m.group("n"))
    if n is None:
        return None
    unit = m.group("unit")
    if unit in ("day", "天"):
        return human_date(day - timedelta(days=n), language)
    if unit in ("week", "周", "星期", "个星期"):
        return _week_label(day, -n, language)
    if unit in ("month", "个月", "月"):
        return _month_label(day, -n, language)
    return _year_label(day, -n, language)


EN_RULES: list[Rule] = [
    (re.compile(r"\bthe day before yesterday\b", re.I), lambda m, d: human_date(d - timedelta(2))),
    (re.compile(r"\b(?:yesterday|last night)\b", re.I), lambda m, d: human_date(d - timedelta(1))),
    (
        re.compile(r"\b(?:today|tonight|this morning|this afternoon|this evening)\b", re.I),
        lambda m, d: human_date(d),
    ),
    (re.compile(r"\btomorrow\b", re.I), lambda m, d: human_date(d + timedelta(1))),
    (re.compile(rf"\b{_EN_COUNT} {_EN_UNITS} ago\b", re.I), lambda m, d: _ago(m, d)),
    (re.compile(r"\blast week\b", re.I), lambda m, d: _week_label(d, -1, "en")),
    (re.compile(r"\bthis week\b", re.I), lambda m, d: _week_label(d, 0, "en")),
    (re.compile(r"\bnext week\b", re.I), lambda m, d: _week_label(d, 1, "en")),
    (
        re.compile(r"\blast weekend\b", re.I),
        lambda m, d: "weekend of " + human_date(_weekday_before(d, 5)),
    ),
    (
        re.compile(r"\bthis (?:past )?weekend\b", re.I),
        lambda m, d: (
            "weekend of "
            + human_date(
                _weekday_before(d, 5) if d.weekday() < 5 else d - timedelta(d.weekday() - 5)
            )
        ),
    ),
    (re.compile(r"\blast month\b", re.I), lambda m, d: _month_label(d, -1, "en")),
    (re.compile(r"\bthis month\b", re.I), lambda m, d: _month_label(d, 0, "en")),
    (re.compile(r"\bnext month\b", re.I), lambda m, d: _month_label(d, 1, "en")),
    (re.compile(r"\blast year\b", re.I), lambda m, d: _year_label(d, -1, "en")),
    (re.compile(r"\bthis year\b", re.I), lambda m, d: _year_label(d, 0, "en")),
    (re.compile(r"\bnext year\b", re.I), lambda m, d: _year_label(d, 1, "en")),
    (
        re.compile(rf"\blast {_WEEKDAY}\b", re.I),
        lambda m, d: human_date(_weekday_before(d, WEEKDAYS.index(m.group("weekday").lower()))),
    ),
    (
        re.compile(rf"\bnext {_WEEKDAY}\b", re.I),
        lambda m, d: human_date(_weekday_after(d, WEEKDAYS.index(m.group("weekday").lower()))),
    ),
]

_ZH_COUNT = r"(?P<n>\d{1,2}|[一两二三四五六七八九十])"
ZH_RULES: list[Rule] = [
    (re.compile("前天"), lambda m, d: human_date(d - timedelta(2), "zh")),
    (re.compile("昨天|昨晚|昨日"), lambda m, d: human_date(d - timedelta(1), "zh")),
    (re.compile("今天|今晚|今早|今日"), lambda m, d: human_date(d, "zh")),
    (re.compile("后天"), lambda m, d: human_date(d + timedelta(2), "zh")),
    (re.compile("明天|明日"), lambda m, d: human_date(d + timedelta(1), "zh")),
    (
        re.compile(rf"{_ZH_COUNT}(?P<unit>天|周|个星期|星期|个月|年)前"),
        lambda m, d: _ago(m, d, "zh"),
    ),
    (re.compile("上周末"), lambda m, d: human_date(_weekday_before(d, 5), "zh") + "那个周末"),
    (re.compile("上(?:个)?(?:周|星期|礼拜)"), lambda m, d: _week_label(d, -1, "zh")),
    (re.compile("下(?:个)?(?:周|星期|礼拜)"), lambda m, d: _week_label(d, 1, "zh")),
    (re.compile("上(?:个)?月"), lambda m, d: _month_label(d, -1, "zh")),
    (re.compile("下(?:个)?月"), lambda m, d: _month_label(d, 1, "zh")),
    (re.compile("前年"), lambda m, d: _year_label(d, -2, "zh")),
    (re.compile("去年"), lambda m, d: _year_label(d, -1, "zh")),
    (re.compile("明年"), lambda m, d: _year_label(d, 1, "zh")),
]


def resolve_relative(text: str, when: datetime | date | None) -> str:
    """``text`` with the absolute date after each relative expression, e.g.
    ``"yesterday"`` → ``"yesterday (6 May 2023)"``, ``"上周"`` → ``"上周（2023年5月1日那周）"``.
    Without a date, or with nothing relative in it, ``text`` comes back unchanged."""
    if when is None or not text:
        return text
    day = when.date() if isinstance(when, datetime) else when
    spans: list[tuple[int, int, str]] = []
    for rules, fmt in ((EN_RULES, " ({})"), (ZH_RULES, "（{}）")):
        for pattern, label in rules:
            for m in pattern.finditer(text):
                if any(m.start() < end and start < m.end() for start, end, _ in spans):
                    continue  # a longer rule already took this span
                value = label(m, day)
                if value:
                    spans.append((m.start(), m.end(), fmt.format(value)))
    if not spans:
        return text
    out: list[str] = []
    last = 0
    for _start, end, note in sorted(spans):
        out.append(text[last:end] + note)
        last = end
    out.append(text[last:])
    return "".join(out)

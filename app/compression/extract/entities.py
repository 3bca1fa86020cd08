"""Entities worth remembering verbatim: ids, paths, URLs, emails, tables, amounts, dates.

Ids and locations become artifacts (an agent that loses a PNR or an output path
will invent one). Amounts and dates are not artifacts on their own: they only
make a sentence worth keeping as a fact.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from app.compression.extract.gates import LEXICON, Gated
from app.compression.state import ArtifactKind


class Found(NamedTuple):
    kind: ArtifactKind
    value: str
    label: str | None


_URL = re.compile(r"\bhttps?://[^\s<>\"'`）)\]，。；、]+", re.IGNORECASE)
_URI = re.compile(r"\b(?:s3a?|gs|hdfs|abfss?|az|wasbs?|file|ftp|sftp)://[^\s<>\"'`）)\]，。；、]+")
# A path needs a leading "/", "~/" or "./" at a word boundary and either an
# extension or two segments, so "and/or" and "km/h" stay prose.
_PATH = re.compile(
    r"(?:(?<=[\s(（\"'`“：:=])|^)"
    r"(?:~|\.{1,2})?/(?:[\w.\-@]+/)*[\w\-@]+(?:\.[A-Za-z0-9]{1,8}|/[\w\-@]+)",
)
# The local part is taken from the start of its run (a "." or "+" before the first
# letter is not part of it), so a long dotted run is scanned once, not from every dot;
# domain labels are atomic: only whole labels are given back to find the TLD.
_EMAIL = re.compile(
    r"(?<![\w.+\-])[.+\-]*+(?P<email>\w[\w.+\-]*+@"
    r"(?>[A-Za-z0-9\-]+)(?:\.(?>[A-Za-z0-9\-]+))*\.[A-Za-z]{2,}\b)"
)
# A table name must look like an identifier (quoted, dotted or snake_case) so
# "book a table for four" is not a table; after 表 any identifier will do.
_IDENT = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){0,2}"
# snake_case or dotted: an identifier with a "_" or "." after its first character. It
# starts where the identifier starts and is taken whole (atomic), so a run of
# underscores or dots costs one pass; ``[A-Za-z_]\w*(?:[_.]\w+)+`` was exponential.
_SNAKE = r"(?<!\w)(?<!\w\.)(?=[A-Za-z_]\w*[_.]\w)(?>[A-Za-z_]\w*(?:\.\w+)*)"
_TABLE = re.compile(
    rf"\btables?\s+(?:[`\"']({_IDENT})[`\"']|({_SNAKE}))"
    rf"|(?:[`\"']({_IDENT})[`\"']|\b({_SNAKE}))\s+table\b"
    rf"|表\s*[`\"'“]?({_IDENT})",
    re.IGNORECASE,
)
_LABELLED_ID = re.compile(
    r"(?P<label>\bPNR\b|\bbooking\s+(?:ref(?:erence)?|code|number|id)\b|\bconfirmation\s+"
    r"(?:code|number|no\.?)|\border\s+(?:id|number|no\.?|#)|\breservation\s+(?:id|code|number)\b"
    r"|\bticket\s+(?:id|number|no\.?)|\binvoice\s+(?:id|number|no\.?)|\btracking\s+"
    r"(?:id|number|no\.?)|\b(?:job|run|task|request|trace|case|issue)\s+id\b"
    r"|订单号|预订号|确认号|确认码|预订码|单号|工单号?|票号|编号|流水号)"
    r"\s*(?:is|was|=|:|：|#|是|为)?\s*[`\"'“]?"
    r"(?P<value>(?=[A-Za-z0-9\-_]{0,40}\d)[A-Za-z0-9][A-Za-z0-9\-_]{3,40})",
    re.IGNORECASE,
)

_ID_HINT = re.compile(
    r"pnr|booking|confirmation|order|reservation|ticket|invoice|tracking|id\b"
    r"|订单|预订|确认|单号|工单|票号|编号|流水号"
)
_BOOKING_LABEL = re.compile(
    r"pnr|booking|confirm|reservation|locator|ticket|order|invoice|tracking|订单|预订|确认|票",
    re.IGNORECASE,
)

# A bare number is read from its first digit (not from each digit of a long run) and
# taken whole (possessive): nothing after it can start with a digit or a comma.
AMOUNT = re.compile(
    r"(?:[¥$€£￥]|\b(?:USD|EUR|CNY|RMB|JPY|GBP|HKD)\s?)\d[\d,]*+(?:\.\d+)?(?:\s?[kKmM万千亿])?"
    r"|(?<!\d)(?<!\d,)\d[\d,]*+(?:\.\d++)?\s?(?:[万千亿])?\s?(?:元|块钱|块|美元|欧元|日元|英镑|港币"
    r"|(?:USD|EUR|CNY|RMB|JPY|GBP|dollars?|euros?|bucks)\b)",
    re.IGNORECASE,
)
_MONTHS = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_WEEKDAYS = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
DATE = re.compile(
    r"\b\d{4}[-/.]\d{1,2}[-/.]\d{1,2}\b"
    r"|\d{1,2}\s*月\s*\d{1,2}\s*[日号]|\d{4}\s*年\s*\d{1,2}\s*月"
    r"|(?:下|这|本|上)?(?:个)?(?:周|星期|礼拜)[一二三四五六日天]|明天|后天|今晚|明早|明晚|下个?月|月底|月初"
    rf"|\b(?:next|this|last|coming)\s+(?:{_WEEKDAYS}|week(?:end)?|month|year)\b"
    rf"|\b(?:tomorrow|tonight|{_WEEKDAYS})\b"
    rf"|\b{_MONTHS}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}})?"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTHS}\b",
    re.IGNORECASE,
)


def _trim(value: str) -> str:
    return value.rstrip(".,;:!?'\"`)]}>，。；：！？、")


def find_artifacts(text: str, *, limit: int = 12) -> list[Found]:
    """Artifacts mentioned in free text, in order of appearance, deduplicated."""
    found: list[tuple[int, Found]] = []
    spans: list[tuple[int, int]] = []

    def add(start: int, end: int, item: Found) -> None:
        # A path inside a URL ("/x/y" of https://h/x/y) is the same artifact.
        if any(s <= start < e for s, e in spans):
            return
        spans.append((start, end))
        found.append((start, item))

    # Each pattern only runs when its cheapest necessary character or word is present.
    if "/" in text:
        for m in _URL.finditer(text):
            add(m.start(), m.end(), Found("url", _trim(m.group()), None))
        for m in _URI.finditer(text):
            add(m.start(), m.end(), Found("path", _trim(m.group()), None))
        for m in _PATH.finditer(text):
            add(m.start(), m.end(), Found("path", _trim(m.group()), None))
    if "@" in text:
        for m in _EMAIL.finditer(text):
            add(m.start("email"), m.end("email"), Found("email", m.group("email"), None))
    lowered = text.lower()
    for m in _LABELLED_ID.finditer(text) if _ID_HINT.search(lowered) else ():
        label = " ".join(m.group("label").split())
        kind: ArtifactKind = "booking_ref" if _BOOKING_LABEL.search(label) else "id"
        add(m.start("value"), m.end("value"), Found(kind, m.group("value"), label))
    for m in _TABLE.finditer(text) if ("table" in lowered or "表" in text) else ():
        group = next(i for i in range(1, 6) if m.group(i))
        add(m.start(group), m.end(group), Found("table", m.group(group), "table"))
    found.sort(key=lambda pair: pair[0])
    unique: dict[tuple[str, str], Found] = {}
    for _, item in found:
        unique.setdefault((item.kind, item.value), item)
    return list(unique.values())[:limit]


# Whether a text holds an amount or a date, asked of the alternatives that can match.
AMOUNT_GATED = Gated(AMOUNT)
DATE_GATED = Gated(DATE)


def has_amount_or_date(text: str) -> bool:
    low = LEXICON.lower(text)
    return AMOUNT_GATED.matches(text, low) or DATE_GATED.matches(text, low)

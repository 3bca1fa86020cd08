"""Identifiers the user states about themselves: kept in the state for good.

"my user ID is mia_2231", "order number 402-1187", "reach me at a@b.com",
"我的工号是 E1029", "会员号 HL-2201", "手机 139-0000-1111": an agent needs them
for the rest of the session, so each becomes a pinned fact ``label: value``
(high-stakes, identity) that no compaction drops. Payment card numbers are the
exception that stays masked (only the last four digits), as elsewhere.

Patterns: a label from a fixed list, a bounded gap, one token; linear.
"""

from __future__ import annotations

import re

from app.compression.state import HighStakesUnit

_I = re.IGNORECASE
# An identifier has a digit in it ("reference" after "booking" is not one).
_TOKEN = r"(?P<value>(?=[A-Za-z0-9_.@+/#-]{0,63}\d)[A-Za-z0-9][A-Za-z0-9_.@+/#-]{2,63})"
_EN_LABEL = (
    r"(?P<label>(?:user|customer|member(?:ship)?|employee|staff|account|order|booking|reservation"
    r"|confirmation|policy|patient|case|ticket|claim|invoice|tracking|passport|loyalty"
    r"|frequent flyer"
    r"|student|badge|license|licence|reference|ref)\s?(?:id|number|no\.?|#|code|reference|ref)?)"
)
_EN = re.compile(rf"\b(?:my|our|the)\s++{_EN_LABEL}\s*+(?:(?:is|=|:|'s)\s*+)?{_TOKEN}", _I)
_EN_AFTER = re.compile(rf"\b{_TOKEN}\s+is\s+(?:my|our)\s+{_EN_LABEL}\b", _I)
_ZH_LABEL = (
    r"(?P<label>工号|员工号|会员号|会员卡号|用户名|用户ID|账号|帐号|订单号|单号|身份证号|手机号|手机|电话"
    r"|联系电话|医保卡号|社保卡号|就诊卡号|护照号|保单号|工单号|合同号|学号|车牌号|预约号|编号|卡号)"
)
_ZH = re.compile(rf"{_ZH_LABEL}\s*+(?:(?:是|为|：|:|留)\s*+)?{_TOKEN}")
_EMAIL = re.compile(
    r"(?P<value>[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,4})"
)
_QUESTION = re.compile(r"[?？]\s*$|(?:吗|呢)[\s。.]*$")
_OWNED = re.compile(r"\b(?:my|our|mine)\b|我的?|我们的?|本人", _I)
_PAYMENT = re.compile(r"card|visa|master|amex|信用卡|银行卡|借记卡", _I)
_PAN = re.compile(r"\d{13,19}|\d{4}(?:[ -]\d{4}){2}[ -]\d{1,7}")
# What each pattern above cannot match without: a digit (``_TOKEN``'s lookahead) or an
# "@" (``_EMAIL``). Most sentences have neither.
_DIGIT = re.compile(r"\d")


def identifier_units(sentence: str, seq: int) -> list[HighStakesUnit]:
    """One pinned ``label: value`` per identifier the sentence states.

    A code the user asks about ("what is item X-12?", "编号 PLG-3 是啥？") is
    something browsed, not theirs: in a question only an identifier said to be
    theirs ("my order number is …", "我的工号…") counts.
    """
    if "@" not in sentence and _DIGIT.search(sentence) is None:
        return []
    found: list[tuple[str, str]] = []
    asking = _QUESTION.search(sentence) is not None
    for pattern in (_EN, _EN_AFTER, _ZH):
        for m in pattern.finditer(sentence):
            if _PAYMENT.search(sentence[max(0, m.start() - 8) : m.end()]):
                continue  # "银行卡号 …", "my card number …": never kept whole
            if asking and not _OWNED.search(sentence[max(0, m.start() - 12) : m.end()]):
                continue
            found.append((m["label"].strip(), m["value"].rstrip(".,;")))
    for m in _EMAIL.finditer(sentence):
        if not any(m["value"] in v for _, v in found):
            found.append(("email", m["value"]))
    units = []
    for label, value in dict.fromkeys(found):
        if _PAYMENT.search(label) or (_PAN.fullmatch(value) and _luhn(value)):
            continue  # a card number is never kept whole
        units.append(
            HighStakesUnit(
                text=f"{label}: {value}", category="identity", source_seqs=[seq], emphasized=True
            )
        )
    return units


def _luhn(value: str) -> bool:
    """Whether a digit string passes the check payment card numbers carry."""
    digits = [int(c) for c in value if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0

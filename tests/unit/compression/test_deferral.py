"""Deferred decisions in indirect phrasing, both languages (our own variants)."""

from __future__ import annotations

import pytest

from app.compression.extract.deferral import deferral, is_deferral

DEFERRED = [
    # putting it off
    "Let's park the patio heater question for now.",
    "Put the upgrade on hold, please.",
    "I want to sleep on the extended warranty.",
    "Leave the catering choice open for the moment.",
    "I'm not ready to commit on the second monitor.",
    "Don't lock in the hotel yet.",
    # coming back to it
    "I'll circle back about the paint colour after the weekend.",
    "Let me get back to you regarding the insurance add-on.",
    "I'll let you know about the dessert table tomorrow.",
    # waiting on someone
    "Hold off on ordering the sofa until my landlord approves.",
    "Once you hear what the auditor thinks, we can pick the vendor.",
    "My sister still needs to weigh in on the venue.",
    "I need to run it by my manager first.",
    "We're waiting on legal for the contract clause.",
    "Still on the fence regarding the extra charging cable.",
    "Put a pin in the travel insurance for me.",
    "The logo refresh can wait.",
    "I'll message you once my landlord replies.",
    "Could we keep the dessert course undecided for now?",
    # Chinese
    "阳台那套桌椅先挂着，等我先生点头再说。",
    "先别急着订酒店，回头我跟同事商量。",
    "升级套餐的事缓一缓，财务那边有消息我再找你。",
    "年假具体哪几天我再想想，过两天再告诉你。",
    "保险要不要升级，回头再说吧。",
    "这个方案我拿不准，得听听财务老周的意见。",
    "搬家公司选哪家还没定，等房东确认了日期再订。",
    "窗帘颜色得我妈拍板，先别下单。",
    "合同先帮我留着，别提交，我们还在比较。",
    "体检套餐我还得跟我对象商量一下。",
]

NOT_DEFERRED = [
    "Book the 9:40 train to Leeds.",
    "The refund went through yesterday.",
    "Should we wait for the auditor?",
    "Never use my old billing address.",
    "I prefer an aisle seat on long flights.",
    "帮我把会议室订到周三下午。",
    "预算上限是八千元。",
    "我要看看菜单。",
    "Thanks, that's all for today!",
]


@pytest.mark.parametrize("sentence", DEFERRED)
def test_deferrals_are_pending(sentence: str) -> None:
    unit = deferral(sentence, 7)
    assert unit is not None and unit.text == sentence and unit.source_seqs == [7]


@pytest.mark.parametrize("sentence", NOT_DEFERRED)
def test_requests_rules_and_questions_are_not(sentence: str) -> None:
    assert not is_deferral(sentence)

"""Realistic multi-turn sessions through the whole pure pipeline:
select_turns → extract → merge → render (→ diff_summary), compressing repeatedly
the way the worker does, in English and in Chinese."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from app.compression.extract.rules import RuleExtractor
from app.compression.merge import diff_summary, merge
from app.compression.render import detect_language, render
from app.compression.state import TaskState
from app.compression.triggers import decide_trigger, select_turns
from app.core.turns import TurnView

from .helpers import assistant, call, result, system, user


def _number(turns: Sequence[TurnView]) -> list[TurnView]:
    """Give turns gapless seqs in order (the fixtures are written without them)."""
    out = []
    for seq, t in enumerate(turns):
        out.append(
            TurnView(
                seq=seq,
                role=t.role,
                content=t.content,
                tool_calls=t.tool_calls,
                tool_call_id=t.tool_call_id,
                name=t.name,
                emphasized=t.emphasized,
            )
        )
    return out


async def _compress_all(turns: list[TurnView]) -> tuple[TaskState, list[str]]:
    """Compress until only the working window is left; returns state and change summaries."""
    extractor = RuleExtractor()
    state, summaries, done = TaskState(), [], 0
    uncompacted = list(turns)
    language = detect_language(t.content for t in turns if t.role == "user")
    while selected := select_turns(uncompacted, compressions_done=done):
        units = await extractor.extract(selected, state)
        new = merge(state, units, through_seq=selected[-1].seq, language=language)
        summaries.append(diff_summary(state, new))
        state, uncompacted, done = new, uncompacted[len(selected) :], done + 1
    assert len(uncompacted) == 3, "everything but the working window is compressed"
    return state, summaries


def _big_result(n: int) -> str:
    return json.dumps(
        {
            "results": [
                {
                    "flight": f"X{i}",
                    "depart": "23:55",
                    "price": 300 + i,
                    "notes": "lorem ipsum " * 40,
                }
                for i in range(n)
            ],
            "count": n,
        }
    )


EN_SESSION = [
    system(0, "You are a travel agent. Always confirm before paying."),
    user(0, "hey!"),
    user(0, "I need to book a trip from Lisbon to Tokyo for a conference on 2026-03-05."),
    user(0, "Never book red-eye flights. My budget is at most $1500 for flights."),
    assistant(0, "Got it. Do you have a seat preference?"),
    user(0, "I prefer aisle seats. Also I'm allergic to peanuts."),
    user(0, "lol my cat just walked over the keyboard"),
    call(0, "c1", "search_flights", {"from": "LIS", "to": "HND", "date": "2026-03-04"}),
    result(0, "c1", _big_result(120)),
    assistant(0, "I found 120 options. Shall I book TP204 departing 10:05 for $1,180?"),
    user(0, "Yes, go ahead."),
    call(0, "c2", "book_flight", {"flight": "TP204", "seat": "aisle"}),
    result(0, "c2", {"error": "payment gateway timeout"}),
    call(0, "c3", "book_flight", {"flight": "TP204", "seat": "aisle"}),
    result(0, "c3", {"pnr": "QX7T2L", "status": "confirmed", "price": 1180}),
    assistant(0, "Your flight is booked."),
    user(0, "thanks!!"),
    user(0, "Set the hotel budget to $200 per night."),
    user(0, "Next, book a hotel near Shinjuku once you have my arrival time."),
    user(0, "how's the weather in Lisbon today?"),
    assistant(0, "I can't check the weather, sorry."),
    user(0, "Actually, the hotel budget should be $250 instead."),
    call(0, "c4", "search_hotels", {"area": "Shinjuku", "max_price": 250}),
    result(0, "c4", [{"hotel_id": "H1", "name": "Keio Plaza", "price": 240}]),
    assistant(0, "Keio Plaza is $240/night. Should I reserve it for 4 nights?"),
    user(0, "Let me check with my manager first, waiting for approval."),
    user(0, "Output the itinerary to /trips/tokyo/itinerary.pdf when done."),
    user(0, "Only use refundable rates for hotels."),
    user(0, "ok"),
    assistant(0, "Understood."),
    user(0, "haha great"),
    user(0, "Also make sure the hotel has a gym."),
    user(0, "ok cool"),
    assistant(0, "Noted!"),
    user(0, "bye for now"),
]

ZH_SESSION = [
    user(0, "你好"),
    user(0, "帮我训练一个中文情感分类模型，数据在 /data/sentiment/train.csv。"),
    user(0, "千万不要用测试集调参！", emphasized=True),
    user(0, "batch size 设为 32，学习率设为 3e-4。"),
    assistant(0, "好的。请问用哪个预训练模型？"),
    user(0, "用 bert-base-chinese 吧"),
    call(0, "t1", "load_dataset", {"path": "/data/sentiment/train.csv"}),
    result(0, "t1", {"rows": 52000, "columns": ["text", "label"], "status": "ok"}),
    user(0, "哈哈，今天天气不错"),
    user(0, "我对青霉素过敏，下周要去医院。"),
    call(0, "t2", "train", {"model": "bert-base-chinese", "batch_size": 32}),
    result(0, "t2", "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory"),
    user(0, "显存不够的话，把 batch size 改成 16"),
    call(0, "t3", "train", {"model": "bert-base-chinese", "batch_size": 16}),
    result(0, "t3", {"status": "success", "run_id": "run-20240305-01", "accuracy": 0.912}),
    assistant(0, "训练完成，准确率 0.912。是否需要我把模型上传到 s3://models/sentiment/？"),
    user(0, "好的，上传吧"),
    call(0, "t4", "upload", {"src": "/tmp/model", "dest": "s3://models/sentiment/"}),
    result(0, "t4", {"status": "ok", "uri": "s3://models/sentiment/v1"}),
    user(0, "谢谢！"),
    user(0, "接下来需要做错误分析，等你拿到验证集的预测结果之后再做。"),
    user(0, "只能用 CPU 做推理。"),
    assistant(0, "明白。"),
    user(0, "嗯嗯"),
    user(0, "把学习率改为 2e-5"),
    assistant(0, "要不要我现在重新训练一次？"),
    user(0, "等我确认一下老板的意见再说。"),
    user(0, "好的"),
    user(0, "辛苦了"),
    assistant(0, "不客气。"),
    user(0, "再见"),
    user(0, "哈哈"),
]


@pytest.fixture(scope="module")
def en_turns() -> list[TurnView]:
    return _number(EN_SESSION)


@pytest.fixture(scope="module")
def zh_turns() -> list[TurnView]:
    return _number(ZH_SESSION)


async def test_english_session_end_to_end(en_turns: list[TurnView]) -> None:
    assert len(en_turns) >= 30
    state, summaries = await _compress_all(en_turns)
    text = render(state)
    lines = text.splitlines()
    assert state.language == "en" and lines[0].startswith("## Task state")
    # goal
    assert (
        "Goal: I need to book a trip from Lisbon to Tokyo for a conference on 2026-03-05." in lines
    )
    # every planted constraint
    for rule in (
        "Always confirm before paying.",
        "Never book red-eye flights.",
        "My budget is at most $1500 for flights.",
        "Only use refundable rates for hotels.",
        "Also make sure the hotel has a gym.",
    ):
        assert f"- {rule}" in lines, rule
    # pinned fact and preference
    assert "- Also I'm allergic to peanuts." in lines
    assert "- I prefer aisle seats." in lines
    # completed and failed actions, each line starting with its marker; the retry is one entry
    done = [line for line in lines if line.startswith("Done ")]
    assert any(
        line.startswith("Done book_flight(flight=TP204, seat=aisle) → pnr=QX7T2L")
        and "(2 calls, 1 failed)" in line
        for line in done
    )
    # a read-only lookup is grouped, not a done item with its result
    assert any(line.startswith("Looked up search_flights") for line in lines)
    assert any(line.startswith("Looked up search_hotels") for line in lines)
    # the long tool output was not copied
    assert "lorem ipsum" not in text and len(text) < 3000
    # current parameter with superseded value
    assert "- hotel budget: $250 (was $200 per night)" in lines
    assert not any(line.startswith("- hotels:") for line in lines), "a rule is not a setting"
    # pending confirmations: the unanswered one stays, the answered one is not pending
    assert "Pending: Keio Plaza is $240/night." not in lines
    assert "Pending: Should I reserve it for 4 nights?" in lines
    assert "- Answered: Do you have a seat preference? → I prefer aisle seats." in lines
    assert "Pending: I found 120 options." not in lines
    assert not any(line.startswith("Pending: Shall I book TP204") for line in lines)
    assert any("waiting for approval" in line and line.startswith("Pending: ") for line in lines)
    # next steps with missing prerequisite, artifacts
    assert ("- book a hotel near Shinjuku (missing: my arrival time)") in lines
    # an id the ledger shows is not repeated as an artifact
    assert "- pnr: QX7T2L" not in lines and "QX7T2L" in text
    assert "/trips/tokyo/itinerary.pdf" in text
    # chit-chat never leaks
    for noise in ("cat", "keyboard", "weather", "haha", "thanks", "bye", "hey!", "ok cool"):
        assert noise not in text.lower(), noise
    assert len(summaries) >= 3 and summaries[0].startswith("Added ")


async def test_chinese_session_end_to_end(zh_turns: list[TurnView]) -> None:
    assert len(zh_turns) >= 30
    state, summaries = await _compress_all(zh_turns)
    text = render(state)
    lines = text.splitlines()
    assert state.language == "zh" and lines[0].startswith("## 任务状态")
    assert "目标：帮我训练一个中文情感分类模型，数据在 /data/sentiment/train.csv。" in lines
    assert "- 千万不要用测试集调参！ (!)" in lines
    assert "- 只能用 CPU 做推理。" in lines
    assert not any(line.startswith("- 只能") and "：" in line for line in lines)
    assert "- 我对青霉素过敏，下周要去医院。" in lines
    # actions: done with 已完成, the OOM failure and its successful retry are different calls
    assert any(line.startswith("已查询 load_dataset") for line in lines)
    assert any(
        line.startswith("失败 train(model=bert-base-chinese, batch_size=32)")
        and "CUDA out of memory" in line
        for line in lines
    )
    assert any(
        line.startswith("已完成 train(model=bert-base-chinese, batch_size=16)")
        and "run-20240305-01" in line
        for line in lines
    )
    assert any(line.startswith("已完成 upload(") for line in lines)
    # parameters: current value with the superseded one
    assert "- batch size：16 (原为 32)" in lines
    assert "- 学习率：2e-5 (原为 3e-4)" in lines
    # pending: the unanswered retrain question and the user's own wait; the answered upload
    # question is not pending any more
    assert "待确认：要不要我现在重新训练一次？" in lines
    assert "待确认：等我确认一下老板的意见再说。" in lines
    assert not any(line.startswith("待确认：") and "上传" in line for line in lines)
    assert any(
        line.startswith("- 已答复：请问用哪个预训练模型？ → 用 bert-base-chinese") for line in lines
    )
    assert "- 做错误分析（缺少：验证集的预测结果）" in lines
    assert "s3://models/sentiment/v1" in text
    for noise in ("天气", "谢谢", "辛苦", "再见", "哈哈", "你好", "嗯嗯", "不客气"):
        assert noise not in text, noise
    assert summaries[0].startswith("新增 ")


async def test_render_budget_on_a_real_session(en_turns: list[TurnView]) -> None:
    from app.core.tokens import count_tokens

    state, _ = await _compress_all(en_turns)
    small = render(state, max_tokens=150)
    assert count_tokens(small) <= 150 or "Pending:" in small
    for must in (
        "Never book red-eye flights.",
        "allergic to peanuts",
        "Pending: Should I reserve it for 4 nights?",
    ):
        assert must in small


def test_triggers_fire_on_a_long_session(en_turns: list[TurnView]) -> None:
    from app.core.tokens import count_tokens

    tokens = sum(count_tokens(t.content) for t in en_turns)
    trigger = decide_trigger(
        history_tokens=tokens,
        history_budget=tokens,
        uncompacted_turns=len(en_turns),
        total_turns=len(en_turns),
        recent=en_turns[-5:],
    )
    assert trigger is not None and trigger.reason == "token_threshold"

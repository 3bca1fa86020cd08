"""What must not become state: small talk, sign-offs, answers stolen by the wrong question.

And what must: a todo's action with the condition it waits on, in both languages.
"""

from __future__ import annotations

import pytest

from app.compression.merge import merge
from app.compression.render import render
from app.compression.state import TaskState

from .helpers import assistant, extract, of_kind, texts, user

GOAL_EN = "Book me a trip to Tokyo for the conference, please."
GOAL_ZH = "帮我安排一次去东京开会的行程。"


# ------------------------------------------------------------------ small talk


@pytest.mark.parametrize(
    "content",
    [
        "random question: do you like jazz?",
        "we're having a barbecue this Saturday, can't wait",
        "I spent like $40 on sushi yesterday haha",
        "my sister is visiting next weekend, the flat is a mess",
        "又是周一，好想放假",
        "周六我们要去爬山，好期待",
        "我昨天吃火锅花了两百块，哈哈",
        "下周末我妹妹要来玩，家里乱糟糟的",
    ],
)
def test_small_talk_with_a_day_or_amount_is_not_state(content: str) -> None:
    goal = GOAL_ZH if any("\u4e00" <= ch <= "\u9fff" for ch in content) else GOAL_EN
    units = extract([user(0, goal), user(1, content)])
    assert [u for u in units if max(u.source_seqs) == 1] == []


@pytest.mark.parametrize(
    "content",
    [
        "The conference starts on 2026-05-12.",
        "The hotel costs $180 per night.",
        "会议周六开始。",
        "酒店每晚 1200 元。",
    ],
)
def test_task_facts_with_a_day_or_amount_are_kept(content: str) -> None:
    assert texts(extract([user(0, GOAL_EN), user(1, content)]), "fact") == [content]


@pytest.mark.parametrize(
    ("content", "name", "value"),
    [
        ("batch size: 32", "batch size", "32"),
        ("learning rate: 3e-4", "learning rate", "3e-4"),
        ("优化器：AdamW", "优化器", "AdamW"),
    ],
)
def test_colon_pairs_still_set_plausible_parameters(content: str, name: str, value: str) -> None:
    [param] = of_kind(extract([user(0, content)]), "parameter")
    assert (param.name, param.value) == (name, value)


@pytest.mark.parametrize(
    "content",
    [
        "random question: do you like jazz?",
        "quick note: I'll be late today",
        "问题：你喜欢爵士乐吗？",
    ],
)
def test_colon_pairs_that_are_speech_are_not_parameters(content: str) -> None:
    assert of_kind(extract([user(0, content)]), "parameter") == []


# ------------------------------------------------------------------ sign-offs and answers


@pytest.mark.parametrize(
    ("signoff", "reply"),
    [
        ("Let me know if you'd like me to dig deeper into any of these.", "Show me hotels."),
        ("Happy to compare more options whenever you want.", "Show me hotels."),
        ("Anything else?", "Show me hotels."),
        ("Hope this helps! Let me know if you need anything else.", "ok"),
        ("如果需要进一步比较，随时告诉我。", "看看新宿附近有哪些酒店。"),
        ("还有什么需要帮忙的吗？", "看看新宿附近有哪些酒店。"),
        ("有需要随时叫我。", "好的"),
    ],
)
def test_signoffs_are_not_pending_and_capture_no_answer(signoff: str, reply: str) -> None:
    units = extract([user(0, GOAL_EN), assistant(1, signoff), user(2, reply)])
    assert of_kind(units, "pending") == [] and of_kind(units, "resolution") == []
    state = merge(TaskState(), units)
    assert "Answered" not in render(state, language="en")


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("Which seat do you prefer, window or aisle?", "Aisle, please."),
        ("Which warehouse should I load into, Snowflake or BigQuery?", "BigQuery."),
        ("Which reason code should I use for the refund?", "Damaged in transit."),
        ("Which region should I deploy first?", "Deploy eu-west-1 first."),
        ("您喜欢靠窗还是靠过道的座位？", "靠过道吧。"),
        ("退款原因代码用哪个？", "运输途中损坏。"),
        ("先部署哪个区域，eu-west-1 还是 us-east-1？", "先部署 eu-west-1。"),
    ],
)
def test_a_question_is_resolved_by_the_reply_that_answers_it(question: str, answer: str) -> None:
    state = merge(TaskState(), extract([assistant(0, question), user(1, answer)]))
    [pending] = state.pending
    assert (pending.status, pending.resolution) == ("resolved", answer)


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("Which seat do you prefer, window or aisle?", "Show me hotels near Shinjuku."),
        ("Which hotel do you like best?", "Show me hotels near Shinjuku."),
        ("Which tokenizer should I use?", "Can you check the GPU quota first?"),
        ("您喜欢靠窗还是靠过道的座位？", "看看新宿附近有哪些酒店。"),
        ("退款原因代码用哪个？", "帮我查一下她的历史订单。"),
    ],
)
def test_the_next_request_does_not_answer_an_open_question(question: str, reply: str) -> None:
    state = merge(TaskState(), extract([assistant(0, question), user(1, reply)]))
    assert [p.status for p in state.pending] == ["pending"]


# ------------------------------------------------------------------ todos and their conditions


@pytest.mark.parametrize(
    ("content", "todo", "missing"),
    [
        ("然后关闭工单，等顾客确认收到换货之后再关。", "关闭工单", ["顾客确认收到换货"]),
        ("然后预约复查验血，等你拿到转诊信之后再约。", "预约复查验血", ["转诊信"]),
        ("接下来要订机场接送，等你拿到我的落地时间之后再订。", "订机场接送", ["我的落地时间"]),
        ("下一步是配置每晚定时运行，需要先确认 DBA 的审批。", "配置每晚定时运行", ["DBA 的审批"]),
        (
            "Then close the ticket once the customer confirms she received it.",
            "close the ticket",
            ["the customer confirms she received it"],
        ),
        (
            "After that, update the status page when you get the green light from QA.",
            "update the status page",
            ["the green light from QA"],
        ),
    ],
)
def test_todo_is_the_action_and_its_condition_is_missing(
    content: str, todo: str, missing: list[str]
) -> None:
    [unit] = of_kind(extract([user(0, content)]), "todo")
    assert (unit.text, unit.missing_prerequisites) == (todo, missing)


# ------------------------------------------------------------------ parameter changes and rules


@pytest.mark.parametrize(
    ("rule", "change"),
    [
        ("退款金额不能超过订单原价。", "把退款金额改成640元。"),
        ("The refund amount must not exceed the order total.", "Set the refund amount to $95."),
    ],
)
def test_changing_a_parameter_keeps_a_rule_that_bounds_it(rule: str, change: str) -> None:
    state = merge(TaskState(), extract([user(0, rule), user(2, change)]))
    assert [c.status for c in state.constraints] == ["active"]
    assert len(state.parameters) == 1

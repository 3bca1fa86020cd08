"""What must not become state: small talk, sign-offs, answers stolen by the wrong question.

And what must: a todo's action with the condition it waits on, in both languages.
"""

from __future__ import annotations

import pytest

from app.compression.merge import merge
from app.compression.render import render
from app.compression.state import TaskState

from .helpers import assistant, extract, of_kind, texts, user

GOAL_EN = "Plan my trip to Lisbon for the summit, please."
GOAL_ZH = "帮我规划一次去里斯本参加峰会的行程。"


def goal_for(content: str) -> str:
    """A goal in the language of ``content``: the sentence under test comes second."""
    return GOAL_ZH if any("\u4e00" <= ch <= "\u9fff" for ch in content) else GOAL_EN


# ------------------------------------------------------------------ small talk


@pytest.mark.parametrize(
    "content",
    [
        "off topic: are you into board games?",
        "we're going camping this Friday, so excited",
        "I paid about $25 for pizza last night lol",
        "my parents fly in next Tuesday and the kitchen is chaos",
        "终于周五了，好想睡懒觉",
        "周日我们去海边烧烤，太开心了",
        "上周我买奶茶花了八十块，笑死",
        "下个月我表哥要来住几天，房间还没收拾",
    ],
)
def test_small_talk_with_a_day_or_amount_is_not_state(content: str) -> None:
    goal = goal_for(content)
    units = extract([user(0, goal), user(1, content)])
    assert [u for u in units if max(u.source_seqs) == 1] == []


@pytest.mark.parametrize(
    "content",
    [
        "The summit opens on 2026-09-03.",
        "The room rate is $210 per night.",
        "峰会周四开幕。",
        "房费每晚 900 元。",
    ],
)
def test_task_facts_with_a_day_or_amount_are_kept(content: str) -> None:
    assert texts(extract([user(0, GOAL_EN), user(1, content)]), "fact") == [content]


@pytest.mark.parametrize(
    ("content", "name", "value"),
    [
        ("batch size: 64", "batch size", "64"),
        ("dropout: 0.1", "dropout", "0.1"),
        ("调度器：cosine", "调度器", "cosine"),
    ],
)
def test_colon_pairs_still_set_plausible_parameters(content: str, name: str, value: str) -> None:
    [param] = of_kind(extract([user(0, content)]), "parameter")
    assert (param.name, param.value) == (name, value)


@pytest.mark.parametrize(
    "content",
    [
        "off topic: are you into board games?",
        "heads up: my train is running late",
        "顺便问一下：你看过这部电影吗？",
    ],
)
def test_colon_pairs_that_are_speech_are_not_parameters(content: str) -> None:
    assert of_kind(extract([user(0, content)]), "parameter") == []


# ------------------------------------------------------------------ sign-offs and answers


@pytest.mark.parametrize(
    ("signoff", "reply"),
    [
        ("Tell me if you want me to look into any of these in more detail.", "Show me cars."),
        ("Glad to pull up more choices any time.", "Show me cars."),
        ("Anything more I can do?", "Show me cars."),
        ("Hope that's useful! Just say if there's more you need.", "ok"),
        ("想再对比其他方案的话，随时说一声。", "看看机场附近有哪些租车公司。"),
        ("还需要我做点别的吗？", "看看机场附近有哪些租车公司。"),
        ("有事随时找我。", "好的"),
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
        ("Which meal do you want, vegetarian or standard?", "Vegetarian, please."),
        ("Which database should I migrate to, Postgres or MySQL?", "Postgres."),
        ("Which shipping method should I pick for the replacement?", "Express delivery."),
        ("Which cluster should I upgrade first?", "Upgrade staging first."),
        ("您想要素食餐还是普通餐？", "素食吧。"),
        ("换货用哪种快递？", "顺丰快递。"),
        ("先升级哪个集群，staging 还是 prod？", "先升级 staging。"),
    ],
)
def test_a_question_is_resolved_by_the_reply_that_answers_it(question: str, answer: str) -> None:
    state = merge(TaskState(), extract([assistant(0, question), user(1, answer)]))
    [pending] = state.pending
    assert (pending.status, pending.resolution) == ("resolved", answer)


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("Which meal do you want, vegetarian or standard?", "Show me rental cars at the airport."),
        ("Which restaurant do you like best?", "Show me rental cars at the airport."),
        ("Which optimizer should I use?", "Can you check the disk usage first?"),
        ("您想要素食餐还是普通餐？", "看看机场附近有哪些租车公司。"),
        ("换货用哪种快递？", "帮我查一下他上个月的账单。"),
    ],
)
def test_the_next_request_does_not_answer_an_open_question(question: str, reply: str) -> None:
    state = merge(TaskState(), extract([assistant(0, question), user(1, reply)]))
    assert [p.status for p in state.pending] == ["pending"]


# ------------------------------------------------------------------ todos and their conditions


@pytest.mark.parametrize(
    ("content", "todo", "missing"),
    [
        ("然后退还押金，等房东确认房屋没有损坏之后再退。", "退还押金", ["房东确认房屋没有损坏"]),
        ("然后预约牙科复诊，等你拿到化验结果之后再约。", "预约牙科复诊", ["化验结果"]),
        ("接下来要订酒店早餐，等你拿到我们的入住人数之后再订。", "订酒店早餐", ["我们的入住人数"]),
        ("下一步是开启自动备份，需要先确认运维的批准。", "开启自动备份", ["运维的批准"]),
        (
            "Then archive the order once the courier confirms the parcel arrived.",
            "archive the order",
            ["the courier confirms the parcel arrived"],
        ),
        (
            "After that, publish the release notes when you get the sign-off from legal.",
            "publish the release notes",
            ["the sign-off from legal"],
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
        ("押金金额不能超过一个月房租。", "把押金金额改成3000元。"),
        ("The discount must not exceed the list price.", "Set the discount to $40."),
    ],
)
def test_changing_a_parameter_keeps_a_rule_that_bounds_it(rule: str, change: str) -> None:
    state = merge(TaskState(), extract([user(0, rule), user(2, change)]))
    assert [c.status for c in state.constraints] == ["active"]
    assert len(state.parameters) == 1


# ------------------------------------------------------------------ deadlines said in passing


@pytest.mark.parametrize(
    "content",
    [
        "One more thing: the feature freeze is next Monday, so it's tight.",
        "We go live on Thursday, heads down until then.",
        "顺便说一句，下周三提测，时间不多了。",
        "另外这批货月底交付。",
    ],
)
def test_a_milestone_with_its_date_is_a_rule(content: str) -> None:
    goal = goal_for(content)
    state = merge(TaskState(), extract([user(0, goal), user(1, content)]))
    assert [c.status for c in state.constraints] == ["active"]


@pytest.mark.parametrize(
    "content",
    [
        "When does the new release ship?",
        "my cousin's band launches their album on Friday lol",
        "下周三提测吗？",
    ],
)
def test_questions_and_small_talk_about_milestones_are_not_rules(content: str) -> None:
    goal = goal_for(content)
    assert of_kind(extract([user(0, goal), user(1, content)]), "constraint") == []


# ------------------------------------------------------------------ parameters in Chinese


@pytest.mark.parametrize(
    ("content", "name", "value"),
    [
        ("缓存过期时间先设成 30 分钟。", "缓存过期时间", "30 分钟"),
        ("镜像版本暂时定为 v2.3。", "镜像版本", "v2.3"),
        ("缓存过期时间我又核实了一下，应该是 45 分钟。", "缓存过期时间", "45 分钟"),
    ],
)
def test_an_adverb_or_a_check_before_the_value_is_not_part_of_the_name(
    content: str, name: str, value: str
) -> None:
    [param] = of_kind(extract([user(0, content)]), "parameter")
    assert (param.name, param.value) == (name, value)

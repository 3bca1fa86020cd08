"""Rule extraction from speech, family by family, in Chinese and English."""

from __future__ import annotations

import pytest

from app.compression.extract.base import Extractor
from app.compression.extract.rules import RuleExtractor, split_sentences
from app.compression.merge import merge
from app.compression.state import TaskState

from .helpers import assistant, extract, kinds, of_kind, system, texts, user


async def test_rule_extractor_satisfies_protocol() -> None:
    extractor = RuleExtractor()
    assert isinstance(extractor, Extractor)
    assert extractor.name == "rules"
    units = await extractor.extract([user(0, "Never book red-eye flights.")], TaskState())
    assert kinds(units) == ["constraint"]


# ------------------------------------------------------------------ noise


@pytest.mark.parametrize(
    "content",
    [
        "thanks!",
        "ok",
        "lol",
        "haha",
        "Hi there!",
        "Good morning :)",
        "great, thanks",
        "How's the weather today?",
        "how are you?",
        "tell me a joke",
        "好的",
        "谢谢",
        "哈哈哈",
        "嗯嗯",
        "收到",
        "今天天气怎么样？",
        "你好吗",
        "辛苦了",
        "👍",
    ],
)
def test_chitchat_produces_nothing(content: str) -> None:
    assert extract([user(5, content)]) == []


def test_noise_between_facts_does_not_leak() -> None:
    units = extract(
        [
            user(0, "lol thanks. Never book red-eye flights. how's the weather?"),
            assistant(1, "You're welcome! Anything else I can help with?"),
        ]
    )
    assert texts(units, "constraint") == ["Never book red-eye flights."]
    assert of_kind(units, "pending") == []
    assert all("weather" not in getattr(u, "text", "") for u in units)


# ------------------------------------------------------------------ constraints


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("Never book red-eye flights.", "Never book red-eye flights."),
        ("Please don't use the test set for tuning.", "Please don't use the test set for tuning."),
        ("Do not touch the production database.", "Do not touch the production database."),
        ("You must keep the total under $800.", "You must keep the total under $800."),
        ("Always cc my manager on emails.", "Always cc my manager on emails."),
        ("Only book refundable fares.", "Only book refundable fares."),
        ("Make sure the hotel has parking.", "Make sure the hotel has parking."),
        (
            "Under no circumstances share my phone number.",
            "Under no circumstances share my phone number.",
        ),
        (
            "Avoid connecting flights through Frankfurt.",
            "Avoid connecting flights through Frankfurt.",
        ),
        ("千万不要订红眼航班！", "千万不要订红眼航班！"),
        ("必须在周五之前完成。", "必须在周五之前完成。"),
        ("禁止修改生产数据库。", "禁止修改生产数据库。"),
        ("只能订经济舱。", "只能订经济舱。"),
        ("务必保留原始数据。", "务必保留原始数据。"),
        ("一定要用 Python 3.11。", "一定要用 Python 3.11。"),
        ("不能超过 500 元。", "不能超过 500 元。"),
        ("别用测试集调参。", "别用测试集调参。"),
        ("不得泄露客户信息。", "不得泄露客户信息。"),
    ],
)
def test_constraints(content: str, expected: str) -> None:
    units = extract([user(3, content)])
    assert texts(units, "constraint") == [expected]
    assert of_kind(units, "constraint")[0].source_seqs == [3]


@pytest.mark.parametrize(
    "content",
    [
        "I never said that was a problem.",
        "I don't know.",
        "能不能帮我看一下？",
        "要不要带伞？",
        "我特别喜欢这个。",
        "It only took five minutes.",
    ],
)
def test_constraint_cues_in_other_senses_are_not_constraints(content: str) -> None:
    assert of_kind(extract([user(1, content)]), "constraint") == []


def test_system_turn_constraints_and_emphasis() -> None:
    units = extract([system(0, "You are a travel agent. NEVER reveal the customer's email.")])
    [rule] = of_kind(units, "constraint")
    assert rule.text == "NEVER reveal the customer's email."
    assert rule.emphasized is True


def test_emphasized_turn_marks_units() -> None:
    units = extract([user(0, "Do not book Ryanair.", emphasized=True)])
    assert of_kind(units, "constraint")[0].emphasized is True
    plain = extract([user(0, "Do not book ryanair flights for this trip.")])
    assert of_kind(plain, "constraint")[0].emphasized is False


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("content", "name", "value", "previous"),
    [
        ("batch size 改成 64", "batch size", "64", None),
        ("把学习率改为 3e-4", "学习率", "3e-4", None),
        ("温度调整为 0.7", "温度", "0.7", None),
        ("把 epoch 从 10 改成 20", "epoch", "20", "10"),
        ("优化器用 AdamW", "优化器", "AdamW", None),
        ("Change the batch size to 64.", "batch size", "64", None),
        ("Set the learning rate to 3e-4 for the next run.", "learning rate", "3e-4", None),
        ("Switch the optimizer from Adam to AdamW.", "optimizer", "AdamW", "Adam"),
        ("Actually, the budget should be $900 instead.", "budget", "$900", None),
        ("lr = 0.001", "lr", "0.001", None),
        ("Destination: Kyoto", "Destination", "Kyoto", None),
        ("目的地：京都", "目的地", "京都", None),
        ("Use AdamW as the optimizer.", "optimizer", "AdamW", None),
        ("Move the meeting to next Friday.", "meeting", "next Friday", None),
        ("Increase the timeout to 30 seconds, please.", "timeout", "30 seconds", None),
    ],
)
def test_parameters(content: str, name: str, value: str, previous: str | None) -> None:
    [param] = of_kind(extract([user(2, content)]), "parameter")
    assert (param.name, param.value, param.previous) == (name, value, previous)


@pytest.mark.parametrize(
    "content",
    [
        "不要把学习率改成 1e-3",
        "Don't set the batch size to 128.",
        "信用卡号码是多少？",
        "It should be fine.",
        "请用中文回答。",
        "Make sure to check the weather.",
    ],
)
def test_not_parameters(content: str) -> None:
    assert of_kind(extract([user(1, content)]), "parameter") == []


def test_use_instead_of_updates_the_parameter_that_holds_the_old_value() -> None:
    units = extract([user(0, "Set the optimizer to SGD."), user(1, "Use AdamW instead of SGD.")])
    params = of_kind(units, "parameter")
    assert [(p.name, p.value) for p in params] == [("optimizer", "SGD"), ("optimizer", "AdamW")]
    assert params[1].previous == "SGD"


def test_parameter_change_retires_the_constraint_that_pinned_it() -> None:
    units = extract([user(0, "batch size 必须是 32"), user(4, "把 batch size 改成 64")])
    [revocation] = of_kind(units, "revocation")
    assert revocation.target == of_kind(units, "constraint")[0].key or revocation.target.startswith(
        "constraint:"
    )
    state = merge(TaskState(), units)
    assert state.active_constraints() == []
    param = state.parameter("batch size")
    assert param is not None and param.value == "64"
    assert [h.value for h in param.history] == ["32"]


# ------------------------------------------------------------------ revocation


@pytest.mark.parametrize(
    ("rule", "revoke"),
    [
        ("Never book red-eye flights.", "Red-eye flights are no longer a problem."),
        ("Never book red-eye flights.", "Forget about the red-eye rule."),
        ("Never book red-eye flights.", "It's fine to book red-eye flights now."),
        ("Only book refundable fares.", "Scratch that."),
        ("不要订红眼航班。", "取消不要订红眼航班的限制。"),
        ("只订直飞航班。", "不再限制只订直飞航班。"),
        ("只订直飞航班。", "算了"),
        ("必须在周五前完成。", "周五前完成的要求不算了。"),
    ],
)
def test_revocations_revoke_the_matching_constraint(rule: str, revoke: str) -> None:
    units = extract([user(0, rule), user(1, revoke)])
    assert len(of_kind(units, "constraint")) == 1, "a revocation must not become a constraint"
    state = merge(TaskState(), units)
    assert [c.status for c in state.constraints] == ["revoked"]
    assert state.constraints[0].revoked_seq == 1


def test_negated_cancel_is_a_constraint_not_a_revocation() -> None:
    units = extract([user(0, "Do not cancel the hotel booking."), user(1, "不要取消酒店预订。")])
    assert of_kind(units, "revocation") == []
    assert len(of_kind(units, "constraint")) == 2


def test_unmatched_cancellation_becomes_a_decision() -> None:
    state = merge(TaskState(), extract([user(0, "Cancel the hotel booking in Osaka.")]))
    assert [d.text for d in state.decisions] == ["Cancel the hotel booking in Osaka."]


def test_todo_revoked_by_cancellation() -> None:
    units = extract([user(0, "接下来需要评估模型。"), user(1, "取消评估模型这个任务")])
    state = merge(TaskState(), units)
    assert [(t.text, t.status) for t in state.todos] == [("评估模型", "cancelled")]


# ------------------------------------------------------------------ entities


def test_ids_paths_urls_emails_are_artifacts() -> None:
    units = extract(
        [
            user(
                0,
                "Data is in /data/raw/train.csv and s3://bucket/models/v2/. "
                "Docs: https://example.com/spec. Mail ops@example.com. PNR is QX7T2L.",
            ),
            user(1, "订单号：ORD-20240305，结果写到表 sales_summary。"),
        ]
    )
    found = {(a.artifact_kind, a.value) for a in of_kind(units, "artifact")}
    assert found == {
        ("path", "/data/raw/train.csv"),
        ("path", "s3://bucket/models/v2/"),
        ("url", "https://example.com/spec"),
        ("email", "ops@example.com"),
        ("booking_ref", "QX7T2L"),
        ("booking_ref", "ORD-20240305"),
        ("table", "sales_summary"),
    }
    assert of_kind(units, "parameter") == []


@pytest.mark.parametrize(
    "content",
    [
        "The conference is on 2026-03-05.",
        "Hotel costs ¥1,200 per night.",
        "会议在3月5日。",
        "机票大概 3000 元。",
        "We fly out next Friday.",
    ],
)
def test_amounts_and_dates_make_facts(content: str) -> None:
    units = extract([user(0, "Plan my trip to Kyoto."), user(1, content)])
    assert texts(units, "fact") == [content]


# ------------------------------------------------------------------ high stakes


@pytest.mark.parametrize(
    ("content", "category"),
    [
        ("I'm allergic to peanuts.", "allergy"),
        ("我对青霉素过敏。", "allergy"),
        ("I take 20mg of atorvastatin daily.", "medical"),
        ("我有哮喘。", "medical"),
        ("Use my card ending in 4242.", "payment"),
        ("我的信用卡尾号 4321。", "payment"),
        ("My frequent flyer number is BA123456.", "account"),
        ("My passport expires in June.", "identity"),
        ("护照号 E12345678。", "identity"),
    ],
)
def test_high_stakes_are_pinned(content: str, category: str) -> None:
    [fact] = of_kind(extract([user(0, content)]), "high_stakes")
    assert fact.category == category
    assert fact.emphasized is True


def test_long_card_numbers_are_masked() -> None:
    [fact] = of_kind(extract([user(0, "My credit card is 4111 1111 1111 1234.")]), "high_stakes")
    assert "4111" not in fact.text and "****1234" in fact.text


# ------------------------------------------------------------------ goals


@pytest.mark.parametrize(
    ("turns", "goal"),
    [
        (
            ["hi!", "Book me a flight from Lisbon to Tokyo on March 5."],
            "Book me a flight from Lisbon to Tokyo on March 5.",
        ),
        (["你好", "帮我训练一个文本分类模型。"], "帮我训练一个文本分类模型。"),
        (
            ["I want to migrate our Postgres 12 cluster to 16. Never drop the old one."],
            "I want to migrate our Postgres 12 cluster to 16.",
        ),
        (["我想订一家京都的酒店，预算 800 元以内。"], "我想订一家京都的酒店，预算 800 元以内。"),
    ],
)
def test_first_substantive_request_is_the_goal(turns: list[str], goal: str) -> None:
    units = extract([user(i, t) for i, t in enumerate(turns)])
    assert texts(units, "goal") == [goal]
    assert of_kind(units, "goal")[0].explicit is False


def test_later_requests_do_not_replace_the_goal_but_explicit_changes_do() -> None:
    units = extract(
        [
            user(0, "Plan a 3-day trip to Kyoto."),
            user(1, "Can you also check the weather in Osaka?"),
            user(2, "Change of plans: my goal is now a week in Hokkaido."),
            user(3, "新任务：整理报销单据。"),
        ]
    )
    goals = of_kind(units, "goal")
    assert [(g.text, g.explicit) for g in goals] == [
        ("Plan a 3-day trip to Kyoto.", False),
        ("a week in Hokkaido.", True),
        ("整理报销单据。", True),
    ]
    state = merge(TaskState(), units)
    assert state.goal is not None and state.goal.text == "整理报销单据。"
    assert [h.value for h in state.goal.history] == [
        "Plan a 3-day trip to Kyoto.",
        "a week in Hokkaido.",
    ]


def test_goal_not_taken_from_chitchat_or_constraints() -> None:
    units = extract([user(0, "hello!"), user(1, "Please never call me before 9am.")])
    assert of_kind(units, "goal") == []


# ------------------------------------------------------------------ pending and resolution


@pytest.mark.parametrize(
    "question",
    [
        "Shall I book flight TP204 for €420?",
        "Should I proceed with the deployment?",
        "Please confirm the delivery address.",
        "Awaiting your approval to send the email.",
        "是否需要我帮您预订？",
        "请确认收货地址。",
        "要不要我把结果发给您？",
        "等待您的确认。",
    ],
)
def test_assistant_questions_become_pending(question: str) -> None:
    units = extract([user(0, "Help me with travel."), assistant(1, question)])
    assert texts(units, "pending") == [question]


@pytest.mark.parametrize(
    "answer",
    [
        "yes",
        "Yes, go ahead.",
        "ok go ahead",
        "sure",
        "No, never mind.",
        "好的",
        "可以",
        "确认",
        "不用了",
        "没问题，订吧",
    ],
)
def test_user_answer_resolves_pending(answer: str) -> None:
    units = extract([assistant(0, "Shall I book flight TP204 for €420?"), user(1, answer)])
    [resolution] = of_kind(units, "resolution")
    assert resolution.target == of_kind(units, "pending")[0].key or resolution.target.startswith(
        "pending:"
    )
    assert of_kind(units, "revocation") == [], "an answer is not a revocation"
    state = merge(TaskState(), units)
    assert state.open_pending() == []
    assert state.pending[0].resolution


def test_unrelated_reply_does_not_resolve_a_yes_no_question() -> None:
    units = extract(
        [
            assistant(0, "Shall I book flight TP204?"),
            user(1, "Also, my budget is at most $900 for everything on this trip."),
        ]
    )
    assert of_kind(units, "resolution") == []
    assert merge(TaskState(), units).open_pending()


def test_short_answer_resolves_a_choice_question() -> None:
    units = extract([assistant(0, "Would you like a window or an aisle seat?"), user(1, "Aisle.")])
    [resolution] = of_kind(units, "resolution")
    assert resolution.answer == "Aisle."


def test_answer_in_next_slice_resolves_pending_from_state() -> None:
    state = merge(
        TaskState(),
        extract([user(0, "Book a table."), assistant(1, "Shall I book Nobu at 8pm?")]),
        through_seq=1,
    )
    units = extract([user(2, "yes please")], state)
    assert merge(state, units).open_pending() == []


def test_user_side_waiting_is_pending() -> None:
    units = extract(
        [user(0, "等我确认一下老板的意见再说。"), user(1, "Venue is TBD, waiting for HR.")]
    )
    assert len(of_kind(units, "pending")) == 2


@pytest.mark.parametrize(
    "offer",
    [
        "All done! Anything else I can do for you today?",
        "All set! Can I help with something more?",
        "还有什么可以帮您的吗？",
    ],
)
def test_rhetorical_questions_are_not_pending(offer: str) -> None:
    assert of_kind(extract([assistant(0, offer)]), "pending") == []


# ------------------------------------------------------------------ todos, blockers, prefs


@pytest.mark.parametrize(
    ("content", "todo", "missing"),
    [
        (
            "Next, book a hotel in Shibuya once you have my arrival time.",
            "book a hotel in Shibuya",
            ["my arrival time"],
        ),
        ("TODO: write the migration script", "write the migration script", []),
        ("We still need to update the README.", "update the README", []),
        (
            "接下来需要评估模型，等你拿到验证集之后再做。",
            "评估模型",
            ["验证集"],
        ),
        ("下一步：部署到测试环境", "部署到测试环境", []),
        ("还需要订酒店，缺少护照号。", "订酒店，缺少护照号", ["护照号"]),
    ],
)
def test_todos(content: str, todo: str, missing: list[str]) -> None:
    [unit] = of_kind(extract([user(0, content)]), "todo")
    assert (unit.text, unit.missing_prerequisites) == (todo, missing)


def test_assistant_plans_are_todos_and_failures_are_blockers() -> None:
    units = extract(
        [
            assistant(0, "Next, I'll search for hotels near the venue."),
            assistant(1, "I couldn't access the booking API because the token expired."),
            assistant(2, "接下来我会整理数据。我无法访问 S3，缺少凭证。"),
        ]
    )
    assert texts(units, "todo") == ["search for hotels near the venue", "整理数据"]
    assert texts(units, "blocker") == [
        "I couldn't access the booking API because the token expired.",
        "我无法访问 S3，缺少凭证。",
    ]


def test_assistant_claims_are_not_history() -> None:
    units = extract([assistant(0, "I have booked your flight and paid $420 for it.")])
    assert of_kind(units, "action") == [] and of_kind(units, "fact") == []


def test_todo_done_by_user_and_by_matching_tool_call() -> None:
    from .helpers import call, result

    units = extract(
        [
            user(0, "Next, search hotels in Kyoto."),
            user(1, "TODO: email the itinerary to Bob."),
            call(2, "c1", "search_hotels", {"city": "Kyoto"}),
            result(3, "c1", [{"id": 1}]),
            user(4, "Emailing the itinerary to Bob is done."),
        ]
    )
    state = merge(TaskState(), units)
    assert {t.text: t.status for t in state.todos} == {
        "search hotels in Kyoto": "done",
        "email the itinerary to Bob": "done",
    }


@pytest.mark.parametrize(
    "content",
    [
        "I prefer aisle seats.",
        "I'd rather take the train.",
        "请用中文回复。",
        "我喜欢靠窗的座位。",
        "Please reply in English.",
    ],
)
def test_preferences(content: str) -> None:
    assert texts(extract([user(0, content)]), "preference") == [content]


@pytest.mark.parametrize(
    "content",
    [
        "Let's go with the Hilton.",
        "We decided to use Postgres.",
        "决定用 Redis 做缓存。",
        "Use AdamW instead of SGD.",
    ],
)
def test_decisions(content: str) -> None:
    assert texts(extract([user(0, content)]), "decision") == [content]


# ------------------------------------------------------------------ sentences


def test_sentence_split_handles_both_languages_and_strips_fillers() -> None:
    assert split_sentences(
        "好的，千万不要订红眼航班！另外预算 500 元。OK, never fly Ryanair. Thanks"
    ) == [
        "千万不要订红眼航班！",
        "预算 500 元。",
        "never fly Ryanair.",
        "Thanks",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Ask Prof. Almeida first. Then file it.", ["Ask Prof. Almeida first.", "Then file it."]),
        (
            "Mrs. Okafor signs on Feb. 3 at St. Luke's.",
            ["Mrs. Okafor signs on Feb. 3 at St. Luke's."],
        ),
        ("Bring snacks, e.g. grapes. No.", ["Bring snacks, e.g. grapes.", "No."]),
        ("It weighs approx. 12 kg. Ship it.", ["It weighs approx. 12 kg.", "Ship it."]),
    ],
)
def test_titles_and_abbreviations_do_not_end_a_sentence(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_a_deferral_naming_a_doctor_is_one_pending_item() -> None:
    [pending] = of_kind(
        extract([user(0, "Hold the MRI slot until Dr. Haddad confirms the referral.")]), "pending"
    )
    assert pending.text == "Hold the MRI slot until Dr. Haddad confirms the referral."


def test_code_blocks_are_not_speech() -> None:
    units = extract([user(0, "Here is my code:\n```\nx = 1\n# never do this\n```")])
    assert of_kind(units, "constraint") == [] and of_kind(units, "parameter") == []

"""Deterministic long agent sessions with planted ground truth, in English and Chinese.

``generate(seed, index, turns, language)`` builds one session: a scenario
(travel, ML training, ETL, support refund, deploy, medical appointment) played
as an agent would post it — user requests, tool calls with JSON arguments and
long JSON results, failures and retries, chit-chat, acknowledgements — with
the items a compressor must keep *planted* at random places:

* ``constraint`` — a rule the user stated (some ``emphasized``);
* ``action_done`` — a successful tool call; recalled by a "Done"/"已完成" line
  naming the tool and an id from its result;
* ``action_failed`` — a failed call retried with other arguments; a
  "Failed"/"失败" line naming the tool and the error;
* ``parameter_current`` / ``parameter_superseded_marked`` — a setting changed
  1–3 times: its latest value shown as current, and no older value shown as
  current (only as "(was …)"/"(原为 …)", or not at all);
* ``pending`` — an assistant confirmation the user left unanswered, under the
  "Pending:"/"待确认：" marker;
* ``high_stakes`` — allergies, medication, card and account numbers;
* ``todo`` — a next step with a missing prerequisite ("(missing: …)"/"（缺少：…）");

plus ``answered`` questions (which must *not* stay pending) and ``noise``:
chit-chat phrases that must not reach the task state. Every planted item
carries the ids of the raw messages that state it, so baselines that keep raw
turns (full history, truncation) are judged on the same items.

The same (seed, index, turns, language) always gives the same session: all
randomness comes from one ``random.Random`` seeded with a string.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Language = Literal["en", "zh"]
Kind = Literal[
    "constraint",
    "action_done",
    "action_failed",
    "parameter_current",
    "parameter_superseded_marked",
    "pending",
    "high_stakes",
    "todo",
    "answered",
]
RECALL_KINDS: tuple[Kind, ...] = (
    "constraint",
    "action_done",
    "action_failed",
    "parameter_current",
    "parameter_superseded_marked",
    "pending",
    "high_stakes",
    "todo",
)
# Planted items land in the first 90% of a session; the tail is ordinary traffic.
PLANT_SPAN = 0.9
MIN_TURNS = 50
MAX_TURNS = 500

Bi = tuple[str, str]  # (English, Chinese)


@dataclass(frozen=True)
class Planted:
    """One item the context must carry, and how to recognise it."""

    kind: Kind
    key: str
    text: str  # the source sentence (or tool call), for reports
    turn_ids: tuple[str, ...]  # raw messages that state it
    planted_at: int  # index of the first of them in the session
    phrases: tuple[str, ...] = ()  # all on one line of the state
    markers: tuple[str, ...] = ()  # that line starts with one of these
    name: str = ""  # parameters: the setting's name
    value: str = ""  # parameters: the current value
    old_values: tuple[str, ...] = ()  # parameters: superseded values, oldest first
    prerequisite: str = ""  # todos: the missing prerequisite, named


@dataclass(frozen=True)
class Noise:
    phrase: str
    turn_id: str


@dataclass
class Session:
    session_id: str
    user_id: str
    language: Language
    scenario: str
    seed: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    planted: list[Planted] = field(default_factory=list)
    noise: list[Noise] = field(default_factory=list)

    def ground_truth(self) -> dict[str, Any]:
        """The planted items and noise, JSON-ready."""
        return {
            "planted": [asdict(p) for p in self.planted],
            "noise": [asdict(n) for n in self.noise],
        }


# ----------------------------------------------------------------- scenario content

Rows = Callable[[random.Random, int], dict[str, Any]]


@dataclass(frozen=True)
class Lookup:
    """Filler: a user asks, the agent calls a search tool, a long list comes back."""

    ask: Bi
    tool: str
    args: Callable[[random.Random], dict[str, Any]]
    row: Rows


@dataclass(frozen=True)
class Act:
    """A tool call whose result carries an id: a planted completed action."""

    ask: Bi
    tool: str
    args: Callable[[random.Random, int], dict[str, Any]]
    id_key: str
    id_prefix: str
    extra: Callable[[random.Random], dict[str, Any]]


@dataclass(frozen=True)
class Fail:
    """A call that fails, then succeeds with other arguments."""

    ask: Bi
    tool: str
    bad_args: dict[str, Any]
    error: dict[str, Any] | str
    error_phrase: str  # what the Failed line must show
    explain: Bi  # the assistant's note before the retry
    good_args: dict[str, Any]
    id_key: str
    id_prefix: str


@dataclass(frozen=True)
class Flaky:
    """A call that hits a transient error and succeeds on an identical retry."""

    ask: Bi
    tool: str
    args: dict[str, Any]
    error: dict[str, Any]
    id_key: str
    id_prefix: str


@dataclass(frozen=True)
class Param:
    name: Bi
    values_en: tuple[str, ...]
    values_zh: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    key: str
    system: Bi
    goal: Bi
    constraints: tuple[tuple[str, str, bool], ...]  # (en, zh, emphasized)
    high_stakes: tuple[tuple[Bi, Bi], ...]  # ((en text, en phrase), (zh text, zh phrase))
    params: tuple[Param, ...]
    acts: tuple[Act, ...]
    fail: Fail
    flaky: Flaky
    pending: tuple[tuple[Bi, Bi, Bi], ...]  # (question, deferral, phrase)
    answered: tuple[tuple[Bi, Bi, Bi], ...]  # (question, answer, phrase)
    todo: tuple[Bi, Bi, Bi]  # (text, phrase, prerequisite phrase)
    lookups: tuple[Lookup, ...]
    qa: tuple[tuple[Bi, Bi], ...]  # task talk: (user question, assistant answer)


_LOREM = (
    "Fare rules apply; changes permitted subject to availability and difference in fare. "
    "Information provided by the supplier and may change without notice. "
)
_LOREM_ZH = "以上信息由供应商提供，可能随时变更，具体以实际为准。"


def _notes(rng: random.Random) -> str:
    return (_LOREM if rng.random() < 0.6 else _LOREM_ZH) * rng.randint(1, 3)


def _flight_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "flight": f"{rng.choice(['TP', 'NH', 'JL', 'LH', 'AF'])}{rng.randint(100, 999)}",
        "depart": f"{rng.randint(0, 23):02d}:{rng.choice(['05', '20', '35', '50'])}",
        "arrive": f"{rng.randint(0, 23):02d}:{rng.choice(['10', '25', '40', '55'])}",
        "stops": rng.randint(0, 2),
        "price": rng.randint(640, 2400),
        "cabin": "economy",
        "notes": _notes(rng),
    }


def _hotel_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "hotel_code": f"H{rng.randint(1000, 9999)}",
        "name": rng.choice(["Keio Plaza", "Park Hyatt", "Hotel Gracery", "Citadines", "Mimaru"]),
        "price": rng.randint(120, 420),
        "rating": round(rng.uniform(3.2, 4.9), 1),
        "refundable": rng.random() < 0.5,
        "amenities": rng.sample(["gym", "pool", "spa", "wifi", "breakfast", "laundry"], 3),
        "notes": _notes(rng),
    }


def _metric_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "epoch": i,
        "step": i * 500,
        "train_loss": round(rng.uniform(0.1, 2.0), 4),
        "val_loss": round(rng.uniform(0.2, 2.1), 4),
        "val_accuracy": round(rng.uniform(0.6, 0.95), 4),
        "lr": 3e-4,
        "gpu_mem_gb": round(rng.uniform(10, 38), 1),
        "log": "grad_norm clipped; throughput stable; no NaN detected. " * rng.randint(1, 3),
    }


def _table_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "order_id": rng.randint(10_000_000, 99_999_999),
        "customer": f"cust_{rng.randint(1000, 9999)}",
        "amount": round(rng.uniform(5, 900), 2),
        "currency": rng.choice(["EUR", "USD", "CNY"]),
        "created": f"2026-03-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z",
        "status": rng.choice(["paid", "shipped", "refunded"]),
        "payload": {"sku": f"SKU-{rng.randint(100, 999)}", "qty": rng.randint(1, 5)},
    }


def _order_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "order": f"ORD-{rng.randint(100000, 999999)}",
        "item": rng.choice(["blender", "kettle", "headphones", "desk lamp", "backpack"]),
        "price": round(rng.uniform(20, 300), 2),
        "shipped": f"2026-02-{rng.randint(1, 28):02d}",
        "carrier": rng.choice(["DHL", "UPS", "SF Express"]),
        "events": [f"scan at hub {rng.randint(1, 40)}" for _ in range(rng.randint(2, 5))],
        "notes": _notes(rng),
    }


def _pod_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "pod": f"api-{rng.randint(10**6, 10**7 - 1):x}",
        "node": f"ip-10-0-{rng.randint(1, 254)}-{rng.randint(1, 254)}",
        "ready": rng.random() < 0.9,
        "restarts": rng.randint(0, 4),
        "cpu_m": rng.randint(50, 900),
        "mem_mi": rng.randint(200, 1800),
        "last_log": "GET /healthz 200 1ms; GET /v1/orders 200 34ms; " * rng.randint(1, 3),
    }


def _doctor_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "doctor_code": f"D{rng.randint(100, 999)}",
        "name": f"Dr. {rng.choice(['Silva', 'Costa', 'Chen', 'Wang', 'Martins', 'Li'])}",
        "clinic": rng.choice(["Northside", "Riverside", "Central", "Harbour"]),
        "distance_km": round(rng.uniform(0.5, 25), 1),
        "next_slot": f"2026-06-{rng.randint(1, 28):02d} {rng.randint(8, 17)}:00",
        "languages": rng.sample(["en", "pt", "zh", "es"], 2),
        "notes": _notes(rng),
    }


def _details(rng: random.Random) -> dict[str, Any]:
    return {
        "audit": [
            {"at": f"2026-03-{rng.randint(1, 28):02d}", "event": "created", "by": "agent"}
            for _ in range(rng.randint(2, 6))
        ],
        "terms": _notes(rng),
    }


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        key="travel",
        system=(
            "You are a travel agent with booking tools.",
            "你是一名可以调用预订工具的旅行助理。",
        ),
        goal=(
            "I need to plan a trip from Lisbon to Tokyo for a conference in May.",
            "帮我安排一次从里斯本去东京参加五月会议的行程。",
        ),
        constraints=(
            ("Never book red-eye flights.", "千万不要订红眼航班。", True),
            ("Only use refundable hotel rates.", "酒店只订可退款的价格。", False),
            (
                "Always confirm with me before any payment.",
                "任何付款之前必须先跟我确认。",
                False,
            ),
        ),
        high_stakes=(
            (
                ("I'm allergic to shellfish, so add that to the meal request.", "shellfish"),
                ("我对海鲜过敏，订餐时请备注。", "海鲜过敏"),
            ),
            (
                ("Please charge the Visa card ending in 4417.", "4417"),
                ("请用尾号 4417 的信用卡付款。", "4417"),
            ),
        ),
        params=(
            Param(
                ("hotel budget", "酒店预算"),
                ("$180 per night", "$220", "$250", "$205"),
                ("每晚1200元", "每晚1500元", "每晚1800元", "每晚1350元"),
            ),
            Param(
                ("return date", "返程日期"),
                ("2026-05-14", "2026-05-16", "2026-05-17", "2026-05-15"),
                ("2026-05-14", "2026-05-16", "2026-05-17", "2026-05-15"),
            ),
        ),
        acts=(
            Act(
                ("Book the TP flight we discussed.", "就订我们说的那班 TP 航班吧。"),
                "book_flight",
                lambda rng, i: {"flight": f"TP{200 + i}", "seat": "aisle", "pax": 1},
                "pnr",
                "",
                lambda rng: {"status": "confirmed", "fare": rng.randint(900, 1400)},
            ),
            Act(
                ("Reserve the hotel near Shinjuku.", "预订新宿附近的那家酒店。"),
                "book_hotel",
                lambda rng, i: {"hotel_code": f"H{4000 + i}", "nights": 3 + i % 3},
                "reservation_id",
                "RSV-",
                lambda rng: {"status": "confirmed", "total": rng.randint(500, 1300)},
            ),
            Act(
                ("Get me a rail pass for the trip.", "帮我买一张 JR 周游券。"),
                "buy_rail_pass",
                lambda rng, i: {"pass": "JR-7day", "start": f"2026-05-{10 + i % 5}"},
                "order_id",
                "JR-",
                lambda rng: {"status": "issued", "price": 50000},
            ),
        ),
        fail=Fail(
            ("Book a table for the team dinner on the 12th.", "帮我订 12 号团队晚餐的位子。"),
            "book_restaurant",
            {"restaurant": "Sushi Dai", "date": "2026-05-12", "party": 8},
            {"error": "party size exceeds the maximum of 6"},
            "party size exceeds",
            (
                "Sushi Dai only takes 6 people; trying Ginza Kagari instead.",
                "Sushi Dai 最多只接待 6 人，我改订 Ginza Kagari。",
            ),
            {"restaurant": "Ginza Kagari", "date": "2026-05-12", "party": 8},
            "booking_ref",
            "TBL-",
        ),
        flaky=Flaky(
            ("Add the conference shuttle to my booking.", "把会议接驳车加到我的预订里。"),
            "add_shuttle",
            {"route": "HND-Shinagawa", "date": "2026-05-11"},
            {"error": "gateway timeout"},
            "shuttle_ref",
            "SH-",
        ),
        pending=(
            (
                (
                    "Travel insurance costs $39 for this trip. Shall I add it?",
                    "这次行程的旅行保险是 39 美元。需要我帮您加上吗？",
                ),
                ("Let me think about that one.", "这个我再想想。"),
                ("Shall I add it?", "需要我帮您加上吗？"),
            ),
        ),
        answered=(
            (
                ("Which seat do you prefer, window or aisle?", "您喜欢靠窗还是靠过道的座位？"),
                ("Aisle, please.", "靠过道吧。"),
                ("Which seat do you prefer", "靠窗还是靠过道"),
            ),
        ),
        todo=(
            (
                "Next, book the airport transfer once you have my landing time.",
                "接下来要订机场接送，等你拿到我的落地时间之后再订。",
            ),
            ("airport transfer", "机场接送"),
            ("landing time", "落地时间"),
        ),
        lookups=(
            Lookup(
                ("Can you look up flights from Lisbon to Tokyo?", "查一下里斯本到东京的航班。"),
                "search_flights",
                lambda rng: {"from": "LIS", "to": "HND", "date": f"2026-05-{rng.randint(8, 10)}"},
                _flight_row,
            ),
            Lookup(
                ("Show me hotels near Shinjuku.", "看看新宿附近有哪些酒店。"),
                "search_hotels",
                lambda rng: {"area": "Shinjuku", "max_price": rng.randint(180, 300)},
                _hotel_row,
            ),
        ),
        qa=(
            (
                ("What's the baggage allowance on that fare?", "这个票价含多少行李额？"),
                ("It includes one 23 kg checked bag.", "含一件 23 公斤的托运行李。"),
            ),
            (
                ("Is the conference venue far from Shinjuku?", "会场离新宿远吗？"),
                ("About 25 minutes by train.", "坐电车大约 25 分钟。"),
            ),
        ),
    ),
    Scenario(
        key="ml_training",
        system=(
            "You are an ML engineering assistant with access to the training cluster.",
            "你是一名可以使用训练集群的机器学习工程助手。",
        ),
        goal=(
            "Help me train a sentiment classifier on the reviews dataset.",
            "帮我在评论数据集上训练一个情感分类模型。",
        ),
        constraints=(
            ("Never tune hyperparameters on the test set.", "千万不要用测试集调参。", True),
            (
                "Only use the A100 nodes in the eu-west cluster.",
                "只能用 eu-west 集群的 A100 节点。",
                False,
            ),
            ("Always log every run to MLflow.", "每次训练都必须记录到 MLflow。", False),
        ),
        high_stakes=(
            (
                ("Bill the compute to cloud account number 4410-2291-7735.", "7735"),
                ("算力费用记到云账号 4410-2291-7735 上。", "7735"),
            ),
        ),
        params=(
            Param(("batch size", "batch size"), ("32", "16", "24", "48"), ("32", "16", "24", "48")),
            Param(
                ("learning rate", "学习率"),
                ("3e-4", "1e-4", "5e-5", "2e-4"),
                ("3e-4", "1e-4", "5e-5", "2e-4"),
            ),
        ),
        acts=(
            Act(
                ("Start a training run.", "开始训练吧。"),
                "train",
                lambda rng, i: {"model": "bert-base", "seed": i, "epochs": 3},
                "run_id",
                "run-",
                lambda rng: {
                    "status": "finished",
                    "val_accuracy": round(rng.uniform(0.85, 0.93), 3),
                },
            ),
            Act(
                ("Evaluate the best checkpoint.", "评估一下最好的 checkpoint。"),
                "evaluate",
                lambda rng, i: {"checkpoint": f"ckpt-{1000 * (i + 1)}", "split": "validation"},
                "eval_id",
                "ev-",
                lambda rng: {"status": "ok", "f1": round(rng.uniform(0.8, 0.92), 3)},
            ),
            Act(
                ("Register the model in the registry.", "把模型注册到模型仓库。"),
                "register_model",
                lambda rng, i: {"name": "sentiment-bert", "stage": "staging", "rev": i},
                "model_version_id",
                "mv-",
                lambda rng: {"status": "registered"},
            ),
        ),
        fail=Fail(
            ("Launch the large-batch run.", "跑一次大 batch 的训练。"),
            "train_large",
            {"model": "bert-large", "batch_size": 128},
            'Traceback (most recent call last):\n  File "train.py", line 88, in step\n'
            "RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB",
            "CUDA out of memory",
            (
                "Out of memory at batch 128; retrying with gradient accumulation.",
                "batch 128 显存不足，改用梯度累积重试。",
            ),
            {"model": "bert-large", "batch_size": 32, "grad_accum": 4},
            "run_id",
            "run-L",
        ),
        flaky=Flaky(
            ("Load the reviews dataset.", "加载评论数据集。"),
            "load_dataset",
            {"path": "s3://data/reviews/v3/train.parquet"},
            {"status": "error", "message": "S3 SlowDown, please retry"},
            "dataset_id",
            "ds-",
        ),
        pending=(
            (
                (
                    "A 5-seed sweep would take about 6 GPU-hours. Should I launch it now?",
                    "5 个种子的扫描大约需要 6 个 GPU 小时。要不要我现在就启动？",
                ),
                (
                    "I need to check our GPU quota with my lead first.",
                    "我得先跟组长确认一下 GPU 配额。",
                ),
                ("Should I launch it now?", "要不要我现在就启动？"),
            ),
        ),
        answered=(
            (
                (
                    "Which tokenizer should I use, cased or uncased?",
                    "用哪个分词器，cased 还是 uncased？",
                ),
                ("Uncased.", "用 uncased 的。"),
                ("Which tokenizer should I use", "用哪个分词器"),
            ),
        ),
        todo=(
            (
                "Then export the model to ONNX after you get the final eval numbers.",
                "之后把模型导出成 ONNX，等你拿到最终评估结果之后再做。",
            ),
            ("export the model to ONNX", "导出成 ONNX"),
            ("final eval numbers", "最终评估结果"),
        ),
        lookups=(
            Lookup(
                ("Show me the training curves of the last run.", "看一下上次训练的曲线。"),
                "get_metrics",
                lambda rng: {"run": f"run-{rng.randint(100, 999)}", "every": 1},
                _metric_row,
            ),
        ),
        qa=(
            (
                ("How many labels does the dataset have?", "数据集有几个标签？"),
                ("Three: positive, neutral and negative.", "三个：正面、中性和负面。"),
            ),
            (
                ("How long does one epoch take?", "一个 epoch 要跑多久？"),
                ("Roughly 14 minutes on one A100.", "单卡 A100 大约 14 分钟。"),
            ),
        ),
    ),
    Scenario(
        key="etl",
        system=(
            "You are a data engineering assistant with warehouse access.",
            "你是一名有数据仓库权限的数据工程助手。",
        ),
        goal=(
            "I want to build a daily pipeline that loads the orders export into the warehouse.",
            "我想搭一个每天把订单导出数据加载进数仓的管道。",
        ),
        constraints=(
            ("Do not touch the production schema.", "绝对不要动生产库的 schema。", True),
            ("Only write to the staging dataset.", "只能写 staging 数据集。", False),
            ("Make sure every job is idempotent.", "确保每个任务都是幂等的。", False),
        ),
        high_stakes=(
            (
                ("The vendor SFTP account number is 88120045, keep it out of logs.", "88120045"),
                ("供应商 SFTP 账号是 88120045，不要写进日志。", "88120045"),
            ),
        ),
        params=(
            Param(
                ("partition date", "分区日期"),
                ("2026-04-01", "2026-04-03", "2026-04-07", "2026-04-02"),
                ("2026-04-01", "2026-04-03", "2026-04-07", "2026-04-02"),
            ),
            Param(
                ("chunk size", "chunk size"),
                ("50000", "20000", "10000", "40000"),
                ("50000", "20000", "10000", "40000"),
            ),
        ),
        acts=(
            Act(
                ("Create the staging table for orders.", "建一张订单的 staging 表。"),
                "create_table",
                lambda rng, i: {"dataset": "staging", "table": f"orders_v{i + 1}"},
                "table_id",
                "tbl-",
                lambda rng: {"status": "created", "columns": 14},
            ),
            Act(
                ("Run the load job.", "跑一下加载任务。"),
                "run_job",
                lambda rng, i: {"job": "load_orders", "shard": i},
                "job_id",
                "job-",
                lambda rng: {"status": "succeeded", "rows_loaded": rng.randint(10**5, 10**6)},
            ),
            Act(
                ("Add a data quality check.", "加一个数据质量检查。"),
                "create_check",
                lambda rng, i: {"table": "staging.orders", "rule": f"not_null_{i}"},
                "check_id",
                "dq-",
                lambda rng: {"status": "active"},
            ),
        ),
        fail=Fail(
            ("Backfill March into staging.", "把三月的数据回填到 staging。"),
            "backfill",
            {"table": "staging.orders", "month": "2026-03", "as": "etl_user"},
            {"status_code": 403, "message": "permission denied for dataset staging"},
            "permission denied",
            (
                "etl_user cannot write there; retrying with the pipeline service account.",
                "etl_user 没有写权限，改用管道服务账号重试。",
            ),
            {"table": "staging.orders", "month": "2026-03", "as": "svc-pipeline"},
            "job_id",
            "bf-",
        ),
        flaky=Flaky(
            ("Pull the latest export from the vendor.", "从供应商那里拉最新的导出文件。"),
            "fetch_export",
            {"source": "sftp", "path": "/exports/orders_latest.csv.gz"},
            {"error": "connection reset by peer"},
            "file_id",
            "f-",
        ),
        pending=(
            (
                (
                    "The backfill left 3 temp tables. Do you want me to drop them?",
                    "回填留下了 3 张临时表。是否需要我删掉它们？",
                ),
                ("Not sure yet, I'll ask the data owner.", "还没想好，我问问数据负责人。"),
                ("Do you want me to drop them?", "是否需要我删掉它们？"),
            ),
        ),
        answered=(
            (
                (
                    "Which warehouse should I load into, Snowflake or BigQuery?",
                    "加载到哪个数仓，Snowflake 还是 BigQuery？",
                ),
                ("BigQuery.", "BigQuery。"),
                ("Which warehouse should I load into", "加载到哪个数仓"),
            ),
        ),
        todo=(
            (
                "Next, schedule the nightly run once we have the DBA's approval.",
                "下一步是配置每晚定时运行，需要先确认 DBA 的审批。",
            ),
            ("schedule the nightly run", "配置每晚定时运行"),
            ("DBA's approval", "DBA 的审批"),
        ),
        lookups=(
            Lookup(
                ("Query a sample of yesterday's orders.", "查一下昨天订单的样本。"),
                "run_query",
                lambda rng: {"sql": "SELECT * FROM raw.orders LIMIT 20", "dry_run": False},
                _table_row,
            ),
        ),
        qa=(
            (
                ("How big is the daily export?", "每天的导出文件有多大？"),
                ("About 1.2 GB compressed.", "压缩后大约 1.2 GB。"),
            ),
            (
                ("Is the export encoded in UTF-8?", "导出文件是 UTF-8 编码吗？"),
                ("Yes, UTF-8 with a header row.", "是的，UTF-8，带表头。"),
            ),
        ),
    ),
    Scenario(
        key="support_refund",
        system=(
            "You are a customer support agent for an online shop.",
            "你是一家网店的客服助理。",
        ),
        goal=(
            "I need to process a refund for a customer whose blender arrived broken.",
            "我需要给一位收到破损搅拌机的顾客办理退款。",
        ),
        constraints=(
            (
                "Never include the customer's full card number in emails.",
                "邮件里千万不要写顾客的完整卡号。",
                True,
            ),
            (
                "Always reply to the customer in a formal tone.",
                "回复顾客时必须使用正式的语气。",
                False,
            ),
            (
                "Refunds must not exceed the original order total.",
                "退款金额不能超过订单原价。",
                False,
            ),
        ),
        high_stakes=(
            (
                ("The customer paid with the Mastercard ending in 5521.", "5521"),
                ("顾客用尾号 5521 的万事达卡付的款。", "5521"),
            ),
            (
                ("She is pregnant, so please expedite the replacement.", "pregnant"),
                ("她怀孕了，请加急处理换货。", "怀孕"),
            ),
        ),
        params=(
            Param(
                ("refund amount", "退款金额"),
                ("$120", "$89.99", "$95", "$110"),
                ("860元", "640元", "700元", "780元"),
            ),
            Param(
                ("shipping method", "配送方式"),
                ("standard", "express", "overnight", "two-day"),
                ("普通快递", "顺丰特快", "次日达", "两日达"),
            ),
        ),
        acts=(
            Act(
                ("Look up her order.", "查一下她的订单。"),
                "lookup_order",
                lambda rng, i: {"email": f"customer{i}@example.com"},
                "order_id",
                "ORD-",
                lambda rng: {"status": "delivered", "total": 120.0},
            ),
            Act(
                ("Create a replacement shipment.", "创建一个换货发货单。"),
                "create_shipment",
                lambda rng, i: {"sku": f"BL-{200 + i}", "qty": 1},
                "shipment_id",
                "SHP-",
                lambda rng: {"status": "label_created"},
            ),
            Act(
                ("Open a ticket with the carrier.", "给物流公司开一个工单。"),
                "create_ticket",
                lambda rng, i: {"carrier": "DHL", "reason": f"damage-{i}"},
                "ticket_id",
                "TCK-",
                lambda rng: {"status": "open"},
            ),
        ),
        fail=Fail(
            ("Issue the refund now.", "现在退款吧。"),
            "issue_refund",
            {"order": "ORD-441", "amount": 130.0, "method": "original"},
            {"success": False, "message": "amount exceeds captured total"},
            "amount exceeds captured total",
            (
                "The refund was above the captured total; retrying with the order total.",
                "退款金额超过了实收金额，按订单总额重试。",
            ),
            {"order": "ORD-441", "amount": 120.0, "method": "original"},
            "refund_id",
            "RF-",
        ),
        flaky=Flaky(
            ("Email her the return label.", "把退货标签发邮件给她。"),
            "send_email",
            {"to": "customer@example.com", "template": "return_label"},
            {"error": "SMTP 451 temporary failure"},
            "message_id",
            "msg-",
        ),
        pending=(
            (
                (
                    "Company policy allows a $15 goodwill voucher. Shall I issue one?",
                    "公司政策允许补偿 100 元代金券。要我发一张吗？",
                ),
                (
                    "Let me ask my supervisor about the voucher.",
                    "代金券的事我先问问主管。",
                ),
                ("Shall I issue one?", "要我发一张吗？"),
            ),
        ),
        answered=(
            (
                (
                    "Which reason code should I use for the refund?",
                    "退款原因代码用哪个？",
                ),
                ("Damaged in transit.", "运输途中损坏。"),
                ("Which reason code should I use", "退款原因代码用哪个"),
            ),
        ),
        todo=(
            (
                "Then close the ticket once the customer confirms she received it.",
                "然后关闭工单，等顾客确认收到换货之后再关。",
            ),
            ("close the ticket", "关闭工单"),
            ("customer confirms", "顾客确认收到换货"),
        ),
        lookups=(
            Lookup(
                ("Pull her order history.", "调一下她的历史订单。"),
                "list_orders",
                lambda rng: {"customer": f"cust_{rng.randint(1000, 9999)}", "limit": 20},
                _order_row,
            ),
        ),
        qa=(
            (
                ("How long do refunds take to show up?", "退款多久能到账？"),
                ("Usually 3 to 5 business days.", "一般 3 到 5 个工作日。"),
            ),
            (
                ("Does the warranty cover the motor?", "保修包括电机吗？"),
                ("Yes, the motor is covered for two years.", "包括，电机保修两年。"),
            ),
        ),
    ),
    Scenario(
        key="devops_deploy",
        system=(
            "You are a DevOps assistant with access to CI and the Kubernetes clusters.",
            "你是一名可以访问 CI 和 Kubernetes 集群的运维助手。",
        ),
        goal=(
            "We need to roll out the new checkout service release to production.",
            "我们需要把新版结算服务发布到生产环境。",
        ),
        constraints=(
            ("Never deploy on a Friday.", "千万不要在周五发布。", True),
            (
                "Always run the smoke tests before promoting to prod.",
                "升级到生产之前必须先跑冒烟测试。",
                False,
            ),
            ("Do not restart the payments database.", "不要重启支付数据库。", True),
        ),
        high_stakes=(
            (
                ("The pager account ID is OPS-552190, do not rotate it.", "OPS-552190"),
                ("值班账号是 OPS-552190，不要轮换。", "OPS-552190"),
            ),
        ),
        params=(
            Param(("replicas", "副本数"), ("3", "5", "4", "6"), ("3", "5", "4", "6")),
            Param(
                ("release tag", "发布版本"),
                ("v2.3.0", "v2.3.1", "v2.3.2", "v2.3.3"),
                ("v2.3.0", "v2.3.1", "v2.3.2", "v2.3.3"),
            ),
        ),
        acts=(
            Act(
                ("Build the image.", "构建镜像。"),
                "build_image",
                lambda rng, i: {"service": "checkout", "commit": f"{rng.getrandbits(28):07x}"},
                "image_id",
                "img-",
                lambda rng: {"status": "pushed", "size_mb": rng.randint(180, 420)},
            ),
            Act(
                ("Deploy to staging.", "部署到 staging。"),
                "deploy",
                lambda rng, i: {"service": "checkout", "env": "staging", "wave": i},
                "deployment_id",
                "dep-",
                lambda rng: {"status": "healthy", "pods": 3},
            ),
            Act(
                ("Run the database migration.", "跑一下数据库迁移。"),
                "run_migration",
                lambda rng, i: {"service": "checkout", "target": f"00{40 + i}"},
                "migration_id",
                "mig-",
                lambda rng: {"status": "applied"},
            ),
        ),
        fail=Fail(
            ("Roll out to the canary.", "先发布到金丝雀环境。"),
            "deploy_canary",
            {"service": "checkout", "weight": 20, "probe": "/health"},
            {"status": "failed", "message": "readiness probe failed: 404 on /health"},
            "readiness probe failed",
            (
                "The probe path is wrong; retrying with /healthz.",
                "探针路径不对，改用 /healthz 重试。",
            ),
            {"service": "checkout", "weight": 20, "probe": "/healthz"},
            "deployment_id",
            "can-",
        ),
        flaky=Flaky(
            ("Run the smoke tests on staging.", "在 staging 上跑冒烟测试。"),
            "run_smoke_tests",
            {"env": "staging", "suite": "checkout-smoke"},
            {"error": "runner lost connection"},
            "test_run_id",
            "tr-",
        ),
        pending=(
            (
                (
                    "The new autoscaling policy is ready. Should I enable it in production?",
                    "新的自动扩缩容策略已经准备好了。要不要在生产环境启用？",
                ),
                ("I'll confirm with the SRE lead tomorrow.", "我明天跟 SRE 负责人确认一下。"),
                ("Should I enable it in production?", "要不要在生产环境启用？"),
            ),
        ),
        answered=(
            (
                (
                    "Which region should I deploy first, eu-west-1 or us-east-1?",
                    "先部署哪个区域，eu-west-1 还是 us-east-1？",
                ),
                ("eu-west-1 first.", "先部署 eu-west-1。"),
                ("Which region should I deploy first", "先部署哪个区域"),
            ),
        ),
        todo=(
            (
                "After that, update the status page when you get the green light from QA.",
                "之后要更新状态页，等你收到 QA 的通过通知之后再更新。",
            ),
            ("update the status page", "更新状态页"),
            ("green light from QA", "QA 的通过通知"),
        ),
        lookups=(
            Lookup(
                ("List the pods in staging.", "列一下 staging 的 pod。"),
                "list_pods",
                lambda rng: {"namespace": "checkout-staging", "selector": "app=checkout"},
                _pod_row,
            ),
        ),
        qa=(
            (
                ("How long does the smoke suite take?", "冒烟测试要跑多久？"),
                ("About 6 minutes.", "大约 6 分钟。"),
            ),
            (
                ("What's the current error rate in staging?", "staging 现在的错误率是多少？"),
                ("0.2% over the last hour.", "过去一小时是 0.2%。"),
            ),
        ),
    ),
    Scenario(
        key="medical_appointment",
        system=(
            "You are a healthcare scheduling assistant.",
            "你是一名医疗预约助理。",
        ),
        goal=(
            "Please help me find a dermatologist and book an appointment.",
            "请帮我找一位皮肤科医生并预约挂号。",
        ),
        constraints=(
            (
                "Only book clinics within 10 km of my home.",
                "只能预约离我家 10 公里以内的诊所。",
                False,
            ),
            ("Never schedule anything before 9 am.", "千万不要约早上 9 点以前。", True),
            (
                "Always use my insurance if the clinic accepts it.",
                "诊所能用医保的话必须用医保。",
                False,
            ),
        ),
        high_stakes=(
            (
                ("I'm allergic to penicillin.", "allergic to penicillin"),
                ("我对青霉素过敏。", "青霉素过敏"),
            ),
            (
                ("I take 20 mg of warfarin daily.", "warfarin"),
                ("我每天服用 20 mg 华法林。", "华法林"),
            ),
        ),
        params=(
            Param(
                ("appointment date", "预约日期"),
                ("2026-06-03", "2026-06-05", "2026-06-09", "2026-06-04"),
                ("2026-06-03", "2026-06-05", "2026-06-09", "2026-06-04"),
            ),
            Param(
                ("preferred time", "就诊时间"),
                ("10:30", "14:00", "16:15", "11:45"),
                ("10:30", "14:00", "16:15", "11:45"),
            ),
        ),
        acts=(
            Act(
                ("Book Dr. Costa.", "就约 Costa 医生吧。"),
                "book_appointment",
                lambda rng, i: {"doctor_code": f"D{300 + i}", "clinic": "Riverside"},
                "appointment_id",
                "APT-",
                lambda rng: {"status": "booked", "room": rng.randint(1, 30)},
            ),
            Act(
                ("Request the prior authorisation.", "申请一下医保预授权。"),
                "request_authorization",
                lambda rng, i: {"plan": "Medis Gold", "procedure": f"consult-{i}"},
                "authorization_id",
                "AUTH-",
                lambda rng: {"status": "approved"},
            ),
            Act(
                ("Set up an SMS reminder.", "设置一个短信提醒。"),
                "schedule_reminder",
                lambda rng, i: {"channel": "sms", "hours_before": 24 - i},
                "reminder_id",
                "REM-",
                lambda rng: {"status": "scheduled"},
            ),
        ),
        fail=Fail(
            ("Transfer my records from the old clinic.", "把我在旧诊所的病历转过来。"),
            "transfer_records",
            {"from_clinic": "Central", "format": "fax"},
            {"error": "fax line unavailable"},
            "fax line unavailable",
            (
                "Central's fax line is down; retrying through the secure portal.",
                "Central 的传真线路不可用，改用安全门户重试。",
            ),
            {"from_clinic": "Central", "format": "portal"},
            "transfer_id",
            "TR-",
        ),
        flaky=Flaky(
            ("Check whether my insurance covers it.", "查一下医保能不能报销。"),
            "check_insurance",
            {"plan": "Medis Gold", "service": "dermatology"},
            {"error": "insurer service unavailable"},
            "eligibility_id",
            "EL-",
        ),
        pending=(
            (
                (
                    "Riverside asks for your previous lab results. "
                    "Would you like me to share them with the clinic?",
                    "Riverside 需要您之前的化验结果。要我把它们发给诊所吗？",
                ),
                ("I'm not sure yet, I'll think about it.", "我还没想好，考虑一下。"),
                ("Would you like me to share them", "要我把它们发给诊所吗？"),
            ),
        ),
        answered=(
            (
                (
                    "Which clinic do you prefer, Northside or Riverside?",
                    "您更想去哪家诊所，Northside 还是 Riverside？",
                ),
                ("Riverside.", "Riverside 吧。"),
                ("Which clinic do you prefer", "更想去哪家诊所"),
            ),
        ),
        todo=(
            (
                "Then book the follow-up blood test once you have the referral letter.",
                "然后预约复查验血，等你拿到转诊信之后再约。",
            ),
            ("follow-up blood test", "复查验血"),
            ("referral letter", "转诊信"),
        ),
        lookups=(
            Lookup(
                ("Find dermatologists near me.", "找一下我家附近的皮肤科医生。"),
                "find_doctors",
                lambda rng: {"specialty": "dermatology", "radius_km": rng.choice([10, 15])},
                _doctor_row,
            ),
        ),
        qa=(
            (
                ("Do I need to fast before the visit?", "就诊前需要空腹吗？"),
                ("No, fasting is not needed for a consultation.", "门诊咨询不需要空腹。"),
            ),
            (
                ("Is there parking at Riverside?", "Riverside 有停车场吗？"),
                ("Yes, an underground car park.", "有，地下停车场。"),
            ),
        ),
    ),
)

# How a setting is first given, and how it is changed: several natural phrasings.
_SET: dict[Language, tuple[str, ...]] = {
    "en": ("Set the {name} to {v}.", "The {name} should be {v}.", "Please use {v} for the {name}."),
    "zh": ("{name}设为{v}。", "把{name}设置成{v}。", "{name}定为{v}。"),
}
_CHANGE: dict[Language, tuple[str, ...]] = {
    "en": (
        "Change the {name} from {old} to {v}.",
        "Actually, the {name} should be {v} instead.",
        "Let's bump the {name} to {v}.",
        "Update the {name} to {v}, please.",
    ),
    "zh": ("把{name}改成{v}。", "{name}从{old}改为{v}。", "{name}调整为{v}吧。", "{name}换成{v}。"),
}
_ACK: dict[Language, tuple[str, ...]] = {
    "en": ("Understood.", "Noted, I'll keep that in mind.", "Will do."),
    "zh": ("明白。", "好的，已记下。", "收到，会照办。"),
}

CHITCHAT: dict[Language, tuple[str, ...]] = {
    "en": (
        "haha my cat just walked across the keyboard",
        "sorry, my kid is yelling in the background",
        "how's the weather over there today?",
        "I really need another coffee right now lol",
        "did you see the game last night? what a finish",
        "we're having a barbecue this Saturday, can't wait",
        "I spent like $40 on sushi yesterday haha",
        "my neighbour is drilling again, so annoying",
        "lol this is taking forever",
        "brb, someone's at the door",
        "ugh, Mondays are the worst",
        "I just finished a 10k run this morning",
        "my internet keeps dropping today, sorry",
        "random question: do you like jazz?",
        "it's raining cats and dogs here",
        "just grabbed a sandwich, back now",
        "my sister is visiting next weekend, the flat is a mess",
        "ha, my dog is snoring under the desk",
    ),
    "zh": (
        "哈哈，我家猫刚刚踩到键盘了",
        "今天天气真好，适合出去玩",
        "等我一下，我去倒杯咖啡",
        "昨晚的球赛你看了吗？太精彩了",
        "周六我们要去爬山，好期待",
        "我昨天吃火锅花了两百块，哈哈",
        "楼上又在装修，吵死了",
        "这网速今天有点慢",
        "刚才开了个会，累死了",
        "你喜欢听爵士乐吗？",
        "外面下大雨了",
        "我去拿个外卖，马上回来",
        "今天早上跑了十公里，腿好酸",
        "又是周一，好想放假",
        "下周末我妹妹要来玩，家里乱糟糟的",
        "我家狗在桌子底下打呼噜，笑死",
    ),
}
CHITCHAT_REPLY: dict[Language, tuple[str, ...]] = {
    "en": (
        "Ha, I hope the keyboard survived!",
        "No worries, take your time.",
        "Sounds like a fun time!",
        "Welcome back!",
        "Enjoy your break!",
    ),
    "zh": (
        "哈哈，希望键盘没事！",
        "没关系，您慢慢来。",
        "听起来很不错！",
        "欢迎回来！",
        "休息一下也好。",
    ),
}
SIGN_OFF: dict[Language, tuple[str, ...]] = {
    "en": (
        "Let me know if you'd like me to dig deeper into any of these.",
        "Hope this helps!",
        "Happy to compare more options whenever you want.",
    ),
    "zh": ("如果需要进一步比较，随时告诉我。", "希望对您有帮助！", "有需要随时叫我。"),
}
ACKS: dict[Language, tuple[str, ...]] = {
    "en": ("ok", "thanks!", "cool", "got it", "great, thanks"),
    "zh": ("好的", "谢谢！", "嗯嗯", "收到", "好的，谢谢"),
}
_DONE_SAY: dict[Language, str] = {"en": "Done: {tool} returned {id}.", "zh": "已办好，编号 {id}。"}
_FOUND_SAY: dict[Language, str] = {
    "en": "I found {n} results; the first one looks like the best fit.",
    "zh": "找到了 {n} 条结果，第一条看起来最合适。",
}


# ----------------------------------------------------------------- building


class _Builder:
    """Appends messages with ids and records what was planted where."""

    def __init__(self, session: Session, rng: random.Random):
        self.s = session
        self.rng = rng
        self.lang: Language = session.language
        self.calls = 0
        self.keys: dict[str, int] = {}

    def pick(self, pair: Bi) -> str:
        return pair[0] if self.lang == "en" else pair[1]

    def add(self, role: str, content: str | None, **extra: Any) -> str:
        mid = f"{self.s.session_id}-m{len(self.s.messages):04d}"
        message: dict[str, Any] = {"role": role, "content": content, "id": mid, **extra}
        self.s.messages.append(message)
        return mid

    def index(self, mid: str) -> int:
        return int(mid.rsplit("-m", 1)[1])

    def key(self, kind: str) -> str:
        self.keys[kind] = self.keys.get(kind, 0) + 1
        return f"{kind}-{self.keys[kind]}"

    def plant(self, kind: Kind, text: str, ids: list[str], **kw: Any) -> None:
        self.s.planted.append(
            Planted(
                kind=kind,
                key=self.key(kind),
                text=text,
                turn_ids=tuple(ids),
                planted_at=self.index(ids[0]),
                **kw,
            )
        )

    def call(self, tool: str, args: dict[str, Any]) -> tuple[str, str]:
        self.calls += 1
        cid = f"call_{self.calls}"
        fn = {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}
        mid = self.add(
            "assistant", None, tool_calls=[{"id": cid, "type": "function", "function": fn}]
        )
        return cid, mid

    def result(self, cid: str, payload: Any) -> str:
        text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
        return self.add("tool", text, tool_call_id=cid)

    def new_id(self, prefix: str) -> str:
        if not prefix:  # airline record locators: six letters and digits
            return "".join(self.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
        return f"{prefix}{self.rng.randint(10_000, 99_999)}"


Beat = Callable[[_Builder], None]
_MARK_DONE = ("Done ", "已完成 ")
_MARK_FAILED = ("Failed ", "失败 ")
_MARK_PENDING = ("Pending: ", "待确认：")


def _constraint_beat(en: str, zh: str, emphasized: bool) -> Beat:
    def beat(b: _Builder) -> None:
        text = b.pick((en, zh))
        extra = {"emphasized": True} if emphasized else {}
        mid = b.add("user", text, **extra)
        b.add("assistant", b.rng.choice(_ACK[b.lang]))
        b.plant("constraint", text, [mid], phrases=(text.rstrip(".。"),))

    return beat


def _high_stakes_beat(item: tuple[Bi, Bi]) -> Beat:
    def beat(b: _Builder) -> None:
        text, phrase = item[0] if b.lang == "en" else item[1]
        mid = b.add("user", text)
        b.add("assistant", b.rng.choice(_ACK[b.lang]))
        b.plant("high_stakes", text, [mid], phrases=(phrase,))

    return beat


def _param_beats(param: Param, changes: int, rng: random.Random, lang: Language) -> list[Beat]:
    values = (param.values_en if lang == "en" else param.values_zh)[: changes + 1]
    name = param.name[0] if lang == "en" else param.name[1]
    said: list[str] = []

    def step(i: int) -> Beat:
        def beat(b: _Builder) -> None:
            templates = _SET[b.lang] if i == 0 else _CHANGE[b.lang]
            template = b.rng.choice(templates)
            text = template.format(name=name, v=values[i], old=values[i - 1] if i else "")
            if b.lang == "en":
                text = text[0].upper() + text[1:]
            said.append(b.add("user", text))
            b.add("assistant", b.rng.choice(_ACK[b.lang]))
            if i == len(values) - 1:
                first = said[-1]
                b.plant(
                    "parameter_current",
                    text,
                    [first],
                    name=name,
                    value=values[-1],
                    old_values=tuple(values[:-1]),
                )
                b.plant(
                    "parameter_superseded_marked",
                    text,
                    [first],
                    name=name,
                    value=values[-1],
                    old_values=tuple(values[:-1]),
                )

        return beat

    return [step(i) for i in range(len(values))]


def _act_beat(act: Act, i: int) -> Beat:
    def beat(b: _Builder) -> None:
        ask = b.add("user", b.pick(act.ask))
        args = act.args(b.rng, i)
        cid, call = b.call(act.tool, args)
        ident = b.new_id(act.id_prefix)
        payload = {act.id_key: ident, **act.extra(b.rng), "details": _details(b.rng)}
        res = b.result(cid, payload)
        b.add("assistant", _DONE_SAY[b.lang].format(tool=act.tool, id=ident))
        text = f"{act.tool}({json.dumps(args, ensure_ascii=False)}) → {act.id_key}={ident}"
        b.plant("action_done", text, [call, res], phrases=(act.tool, ident), markers=_MARK_DONE)
        del ask

    return beat


def _fail_beat(fail: Fail) -> Beat:
    def beat(b: _Builder) -> None:
        b.add("user", b.pick(fail.ask))
        cid, call = b.call(fail.tool, fail.bad_args)
        res = b.result(cid, fail.error)
        b.add("assistant", b.pick(fail.explain))
        text = f"{fail.tool}({json.dumps(fail.bad_args)}) → {fail.error_phrase}"
        b.plant(
            "action_failed",
            text,
            [call, res],
            phrases=(fail.tool, fail.error_phrase),
            markers=_MARK_FAILED,
        )
        cid, call = b.call(fail.tool, fail.good_args)
        ident = b.new_id(fail.id_prefix)
        res = b.result(cid, {fail.id_key: ident, "status": "ok", "details": _details(b.rng)})
        b.add("assistant", _DONE_SAY[b.lang].format(tool=fail.tool, id=ident))
        text = f"{fail.tool}({json.dumps(fail.good_args)}) → {fail.id_key}={ident}"
        b.plant("action_done", text, [call, res], phrases=(fail.tool, ident), markers=_MARK_DONE)

    return beat


def _flaky_beat(flaky: Flaky) -> Beat:
    def beat(b: _Builder) -> None:
        b.add("user", b.pick(flaky.ask))
        cid, first = b.call(flaky.tool, flaky.args)
        b.result(cid, flaky.error)
        cid, call = b.call(flaky.tool, flaky.args)
        ident = b.new_id(flaky.id_prefix)
        res = b.result(cid, {flaky.id_key: ident, "status": "ok", "details": _details(b.rng)})
        b.add("assistant", _DONE_SAY[b.lang].format(tool=flaky.tool, id=ident))
        text = f"{flaky.tool}({json.dumps(flaky.args)}) failed once, then → {ident}"
        b.plant("action_done", text, [call, res], phrases=(flaky.tool, ident), markers=_MARK_DONE)
        del first

    return beat


def _pending_beat(item: tuple[Bi, Bi, Bi]) -> Beat:
    def beat(b: _Builder) -> None:
        question = b.pick(item[0])
        mid = b.add("assistant", question)
        reply = b.add("user", b.pick(item[1]))
        b.plant(
            "pending",
            question,
            [mid, reply],
            phrases=(b.pick(item[2]).rstrip("?？"),),
            markers=_MARK_PENDING,
        )

    return beat


def _answered_beat(item: tuple[Bi, Bi, Bi]) -> Beat:
    def beat(b: _Builder) -> None:
        question = b.pick(item[0])
        mid = b.add("assistant", question)
        answer = b.add("user", b.pick(item[1]))
        b.add("assistant", b.rng.choice(_ACK[b.lang]))
        b.plant(
            "answered",
            question,
            [mid, answer],
            phrases=(b.pick(item[2]),),
            markers=_MARK_PENDING,
        )

    return beat


def _todo_beat(todo: tuple[Bi, Bi, Bi]) -> Beat:
    def beat(b: _Builder) -> None:
        text = b.pick(todo[0])
        mid = b.add("user", text)
        b.add("assistant", b.rng.choice(_ACK[b.lang]))
        b.plant(
            "todo",
            text,
            [mid],
            phrases=(b.pick(todo[1]),),
            markers=("- ",),
            prerequisite=b.pick(todo[2]),
        )

    return beat


# -- filler


def _chitchat(b: _Builder, unused: list[str]) -> None:
    if not unused:
        unused.extend(CHITCHAT[b.lang])
        b.rng.shuffle(unused)
    text = unused.pop()
    mid = b.add("user", text)
    b.s.noise.append(Noise(text, mid))
    reply = b.rng.choice(CHITCHAT_REPLY[b.lang])
    b.s.noise.append(Noise(reply, b.add("assistant", reply)))


def _lookup(b: _Builder, scenario: Scenario) -> None:
    lookup = b.rng.choice(scenario.lookups)
    b.add("user", b.pick(lookup.ask))
    cid, _ = b.call(lookup.tool, lookup.args(b.rng))
    n = b.rng.choice([4, 8, 12, 20, 30])
    b.result(cid, {"results": [lookup.row(b.rng, i) for i in range(n)], "count": n})
    b.add("assistant", _FOUND_SAY[b.lang].format(n=n))
    if b.rng.random() < 0.35:
        text = b.rng.choice(SIGN_OFF[b.lang])
        b.s.noise.append(Noise(text, b.add("assistant", text)))


def _qa(b: _Builder, scenario: Scenario) -> None:
    question, answer = b.rng.choice(scenario.qa)
    b.add("user", b.pick(question))
    b.add("assistant", b.pick(answer))


def _ack(b: _Builder) -> None:
    b.add("user", b.rng.choice(ACKS[b.lang]))


def _filler(b: _Builder, scenario: Scenario, unused: list[str]) -> None:
    roll = b.rng.random()
    if roll < 0.25:
        _chitchat(b, unused)
    elif roll < 0.70:
        _lookup(b, scenario)
    elif roll < 0.85:
        _qa(b, scenario)
    else:
        _ack(b)


# ----------------------------------------------------------------- the generator


def _beats(scenario: Scenario, rng: random.Random, lang: Language, turns: int) -> list[Beat]:
    """Planted beats in a random order that keeps each parameter's changes in sequence."""
    single: list[Beat] = [_constraint_beat(*c) for c in scenario.constraints]
    single += [_high_stakes_beat(h) for h in scenario.high_stakes]
    single += [_fail_beat(scenario.fail), _flaky_beat(scenario.flaky)]
    single += [_pending_beat(p) for p in scenario.pending]
    single += [_answered_beat(a) for a in scenario.answered]
    single.append(_todo_beat(scenario.todo))
    # Longer sessions do more work: one more completed action per ~40 turns.
    n_acts = 2 + turns // 40
    single += [_act_beat(scenario.acts[i % len(scenario.acts)], i) for i in range(n_acts)]
    keyed: list[tuple[float, Beat]] = [(rng.random(), beat) for beat in single]
    for param in scenario.params:
        steps = _param_beats(param, rng.randint(1, 3), rng, lang)
        positions = sorted(rng.random() for _ in steps)
        keyed += list(zip(positions, steps, strict=True))
    keyed.sort(key=lambda kb: kb[0])
    return [beat for _, beat in keyed]


def generate(
    *, seed: int | str, index: int, turns: int, language: Language, scenario: str | None = None
) -> Session:
    """One session of about ``turns`` messages (a tool exchange is never cut)."""
    if not MIN_TURNS <= turns <= MAX_TURNS:
        raise ValueError(f"turns must be within {MIN_TURNS}–{MAX_TURNS}, got {turns}")
    tag = f"{seed}:{index}:{turns}:{language}:{scenario}"
    rng = random.Random(tag)
    chosen = (
        next(s for s in SCENARIOS if s.key == scenario)
        if scenario
        else SCENARIOS[index % len(SCENARIOS)]
    )
    session = Session(
        session_id=f"recall-{index:03d}-{language}-{chosen.key}",
        user_id=f"recall-user-{index:03d}",
        language=language,
        scenario=chosen.key,
        seed=tag,
    )
    b = _Builder(session, rng)
    b.add("system", b.pick(chosen.system))
    b.add("user", b.pick(chosen.goal))
    b.add("assistant", b.rng.choice(_ACK[language]))
    beats = _beats(chosen, rng, language, turns)
    unused: list[str] = []
    span = int(turns * PLANT_SPAN)
    # Spread the planted beats over the span: each beat is preceded by filler until
    # the session reaches its share of the span (a beat is ~2–7 messages).
    for i, beat in enumerate(beats):
        target = 3 + (span - 3) * i / max(1, len(beats))
        target -= rng.uniform(0, (span - 3) / max(1, len(beats)) * 0.8)
        while len(session.messages) < target:
            _filler(b, chosen, unused)
        beat(b)
    while len(session.messages) < turns:
        _filler(b, chosen, unused)
    return session


def plan_sessions(
    *, seed: int | str, count: int, min_turns: int, max_turns: int
) -> list[tuple[int, int, Language]]:
    """(index, turns, language) of ``count`` sessions: lengths spread evenly, languages
    alternating, so every run covers short and long sessions in both languages."""
    if count < 1:
        return []
    step = (max_turns - min_turns) / max(1, count - 1)
    lengths = [round(min_turns + i * step) for i in range(count)]
    random.Random(f"{seed}:lengths").shuffle(lengths)
    languages: list[Language] = ["en", "zh"]
    return [(i, lengths[i], languages[i % 2]) for i in range(count)]

"""The dataset benchmarks' pure parts on tiny synthetic records: evidence
normalisation, label-free renaming, what is posted, BM25, and the scores."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from bench.datasets import importer, locomo, longmemeval
from bench.datasets.baselines import BM25, DenseIndex, tokens
from bench.datasets.model import Question, api_id
from bench.datasets.progress import Progress
from bench.datasets.scoring import (
    Hit,
    answer_present,
    by_category,
    percentile,
    prefix_by_chars,
    question_scores,
)


def _locomo_record() -> dict[str, Any]:
    def turns(session: int, n: int) -> list[dict[str, Any]]:
        speakers = ["Ann", "Bob"]
        return [
            {
                "speaker": speakers[i % 2],
                "dia_id": f"D{session}:{i + 1}",
                "text": f"s{session} t{i + 1}",
            }
            for i in range(n)
        ]

    session_2 = turns(2, 3)
    session_2[1]["blip_caption"] = "a photo of a red kayak"
    return {
        "sample_id": "conv-9",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1": turns(1, 2),
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2": session_2,
            "session_2_date_time": "10:05 am on 12 June, 2023",
            "session_3_date_time": "9:00 am on 1 July, 2023",  # a date with no turn list
        },
        "qa": [
            {"question": "q0", "answer": 2022, "evidence": ["D1:2"], "category": 2},
            {"question": "q1", "answer": "x", "evidence": ["D1:1; D2:3"], "category": 1},
            {"question": "q2", "answer": "x", "evidence": ["D:2:1", "D02:02"], "category": 4},
            {"question": "q3", "answer": "x", "evidence": ["D", "D2:19"], "category": 3},
            {"question": "q4", "evidence": ["D2:1"], "category": 5, "adversarial_answer": "y"},
        ],
    }


# --------------------------------------------------------------------------- LoCoMo


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (["D8:6; D9:17"], ["D8:6", "D9:17"]),
        (["D:11:26"], ["D11:26"]),
        (["D"], []),
        (["D10:19"], []),  # past the end of session 10
        (["D03:007", "D3:7"], ["D3:7"]),
        (["D1:1 D1:2", "D1:1"], ["D1:1", "D1:2"]),
    ],
)
def test_locomo_evidence_normalisation(entries: list[str], expected: list[str]) -> None:
    known = ["D8:6", "D9:17", "D11:26", "D10:16", "D3:7", "D1:1", "D1:2"]
    assert locomo.normalise_evidence(entries, known) == expected


def test_locomo_conversion() -> None:
    data = locomo.convert([_locomo_record()])
    (user,) = data.users
    assert user.user_id == "locomo-conv-9"
    assert [s.session_id for s in user.sessions] == ["locomo-conv-9-D1", "locomo-conv-9-D2"]
    s1, s2 = user.sessions
    assert [t.dataset_id for t in s2.turns] == ["D2:1", "D2:2", "D2:3"]
    assert [t.role for t in s1.turns] == ["user", "assistant"]  # speaker_a is the user
    assert [t.name for t in s1.turns] == ["Ann", "Bob"]
    assert s1.turns[0].created_at == "2023-05-08T13:56:00Z"
    assert s1.turns[1].created_at == "2023-05-08T13:56:30Z"
    assert s2.turns[1].content == "s2 t2 [shares a photo: a photo of a red kayak]"
    q = {x.question: x for x in data.questions}
    assert q["q0"].answer == "2022" and q["q0"].evidence_turns == {"D1:2"}
    assert q["q1"].evidence_sessions == {"locomo-conv-9-D1", "locomo-conv-9-D2"}
    assert q["q2"].evidence_turns == {"D2:1", "D2:2"}
    assert not q["q3"].scored and q["q3"].evidence_turns == frozenset()
    assert q["q4"].answer is None and q["q4"].scored


def test_locomo_dates() -> None:
    assert locomo.parse_date("7:55 pm on 9 June, 2023").isoformat() == "2023-06-09T19:55:00+00:00"
    with pytest.raises(ValueError):
        locomo.parse_date("yesterday")


# --------------------------------------------------------------------------- LongMemEval


def _lme_record(qid: str = "gpt4_abc") -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_type": "multi-session",
        "question": "How many?",
        "answer": 3,
        "question_date": "2023/06/16 (Fri) 17:33",
        "haystack_session_ids": ["sharegpt_x_1", "answer_abc_1", "e47becba", "answer_abc_2"],
        "haystack_dates": [
            "2023/05/20 (Sat) 02:21",
            "2023/05/21 (Sun) 10:00",
            "2023/05/22 (Mon) 11:00",
            "2023/05/23 (Tue) 12:00",
        ],
        "haystack_sessions": [
            [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
            [
                {"role": "user", "content": "I tried 2 recipes", "has_answer": True},
                {"role": "assistant", "content": "nice", "has_answer": False},
            ],
            [{"role": "user", "content": "filler"}],
            [{"role": "user", "content": "and one more", "has_answer": True}],
        ],
        "answer_session_ids": ["answer_abc_2", "answer_abc_1"],
    }


def test_longmemeval_renaming_hides_labels() -> None:
    data = longmemeval.convert([_lme_record()])
    (user,) = data.users
    (question,) = data.questions
    assert user.user_id == "lme-gpt4-abc"
    ids = [s.session_id for s in user.sessions]
    assert ids == [f"lme-gpt4-abc-S{i}" for i in range(1, 5)]
    assert question.evidence_sessions == {"lme-gpt4-abc-S2", "lme-gpt4-abc-S4"}
    assert question.evidence_turns == {"S2:1", "S4:1"}
    assert data.session_labels["lme-gpt4-abc-S2"] == "answer_abc_1"
    # Nothing posted mentions a label: no "answer" and no has_answer.
    posted = [importer.message(t) for _, t in user.turns()]
    blob = json.dumps([ids, posted])
    assert "answer" not in blob and "has_answer" not in blob and "sharegpt" not in blob
    assert posted[0]["created_at"] == "2023-05-20T02:21:00Z"
    assert posted[1]["created_at"] == "2023-05-20T02:21:30Z"
    assert posted[2]["metadata"] == {"dataset_id": "S2:1"}
    assert question.answer == "3" and question.scored


def test_longmemeval_abstention_is_not_scored() -> None:
    record = _lme_record("0a1b_abs")
    assert not longmemeval.convert([record]).questions[0].scored


def test_api_ids() -> None:
    assert api_id("lme", "gpt4_2d58bcd6") == "lme-gpt4-2d58bcd6"
    assert api_id("locomo", "conv-26", "D3") == "locomo-conv-26-D3"
    with pytest.raises(ValueError):
        api_id("x" * 200)


# --------------------------------------------------------------------------- importer


def test_message_shape_and_batches() -> None:
    data = locomo.convert([_locomo_record()])
    turn = data.users[0].sessions[0].turns[0]
    assert importer.message(turn) == {
        "role": "user",
        "content": "s1 t1",
        "id": "D1:1",
        "created_at": "2023-05-08T13:56:00Z",
        "metadata": {"dataset_id": "D1:1", "speaker": "Ann"},
        "name": "Ann",
    }
    many = [turn] * 250
    assert [len(b) for b in importer.batches(many)] == [100, 100, 50]


def test_import_state_resumes_only_the_same_dataset(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = importer.ImportState.open(path, "fp1")
    state.mark("s-1")
    state.mark("s-2")
    assert importer.ImportState.open(path, "fp1").done == {"s-1", "s-2"}
    assert importer.ImportState.open(path, "fp2").done == set()
    path.write_text("{not json")
    assert importer.ImportState.open(path, "fp1").done == set()


def test_progress_bar_writes_deciles_when_not_a_tty() -> None:
    stream = io.StringIO()
    bar = Progress(20, "things", stream=stream)
    for _ in range(20):
        bar.advance()
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 11 and lines[-1].startswith("[" + "#" * 24 + "] 20/20 things")


# --------------------------------------------------------------------------- baselines


def test_tokens_words_and_cjk_bigrams() -> None:
    assert tokens("Hello, WORLD! It's 3.5") == ["hello", "world", "it", "s", "3", "5"]
    assert tokens("我对花生过敏") == ["我对", "对花", "花生", "生过", "过敏"]
    assert tokens("用Python写") == ["用", "python", "写"]


def test_bm25_prefers_rare_matching_terms() -> None:
    docs = ["the cat sat", "the dog sat on the mat", "a kayak on the lake", "the the the"]
    index = BM25(docs)
    assert index.top("red kayak", 2) == [2]
    assert index.top("the dog", 1) == [1]
    assert index.top("nothing matches", 3) == []


def test_dense_index_orders_by_cosine() -> None:
    index = DenseIndex([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    assert index.top([0.0, 1.0], 2) == [1, 2]
    assert DenseIndex([]).top([1.0], 3) == []


# --------------------------------------------------------------------------- scoring


def _question(turns: set[str], sessions: set[str]) -> Question:
    return Question("q", "u", "?", "a", "1", frozenset(turns), frozenset(sessions))


def test_recall_at_k_counts_provenance_of_the_top_k() -> None:
    q = _question({"D1:1", "D2:5"}, {"s1", "s2"})
    hits = [
        Hit(("D1:1", "D1:2"), ("s1",), "x" * 10),
        Hit(("D3:1",), ("s3",), "y" * 10),
        Hit(("D2:4", "D2:5"), ("s2",), "z" * 10),
    ]
    scores = question_scores(q, hits, [1, 2, 3], equal_chars=15)
    assert scores["turn_r@1"] == 0.5 and scores["session_r@1"] == 0.5
    assert scores["turn_r@2"] == 0.5
    assert scores["turn_r@3"] == 1.0 and scores["session_r@3"] == 1.0
    assert scores["turn_r@chars"] == 0.5  # 15 chars: the first two hits
    assert question_scores(_question(set(), {"s1"}), hits, [1])["turn_r@1"] is None


def test_prefix_by_chars() -> None:
    hits = [Hit((), (), "abc"), Hit((), (), "defg"), Hit((), (), "h")]
    assert prefix_by_chars(hits, 1) == 1
    assert prefix_by_chars(hits, 7) == 2
    assert prefix_by_chars(hits, 100) == 3


@pytest.mark.parametrize(
    ("answer", "context", "expected"),
    [
        ("7 May 2023", "…went on 7 May, 2023.", True),
        ("Psychology", "she studies PSYCHOLOGY", True),
        ("10", "in 2010 we", False),
        ("10", "about 10 times", True),
        ("花生", "我对花生过敏", True),
        (None, "anything", None),
        ("!!", "anything", None),
    ],
)
def test_answer_presence(answer: str | None, context: str, expected: bool | None) -> None:
    assert answer_present(answer, context) is expected


def test_by_category_means_skip_missing_values() -> None:
    rows: list[dict[str, Any]] = [
        {"category": "1", "m": 1.0},
        {"category": "1", "m": None},
        {"category": "2", "m": 0.0},
    ]
    out = by_category(rows, ["m"], groups={"1,2": ("1", "2")})
    assert out["1"] == {"n": 2, "m": 1.0}
    assert out["1,2"]["m"] == 0.5 and out["all"]["n"] == 3


def test_percentile_nearest_rank() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 90) == 5.0
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([], 50) is None


def test_latency_rounds_pool_every_read_and_divide_cpu_by_reads() -> None:
    from bench.datasets.runner import rounds_stats

    rounds = [
        {
            "ms": [10.0, 30.0],
            "api_cpu_s": 0.01,
            "postgres_cpu_s": 0.004,
            "healthz_ms_p50": 1.0,
            "loadavg_1m": [0.5, 0.6],
            "differ": [],
        },
        {
            "ms": [20.0, 40.0],
            "api_cpu_s": 0.03,
            "postgres_cpu_s": None,  # not our Postgres
            "healthz_ms_p50": 3.0,
            "loadavg_1m": [0.6, 0.7],
            "differ": ["q2"],
        },
    ]
    figures = rounds_stats(rounds)
    assert figures["context_ms_p50_new_query"] == 25.0
    assert figures["context_ms_p90_new_query"] == 40.0
    assert figures["new_query_reads"] == 4
    assert figures["new_query_rounds_p50"] == [20.0, 30.0]
    assert figures["new_query_api_cpu_ms_per_read"] == 10.0
    assert figures["new_query_postgres_cpu_ms_per_read"] is None
    assert figures["new_query_healthz_ms_p50"] == 2.0
    assert figures["new_query_reads_differing"] == 1
    warm = rounds_stats(rounds, kind="warm")
    assert warm["context_ms_p50_new_query_warm"] == 25.0
    assert warm["new_query_warm_reads"] == 4
    assert not {"context_ms_p50_new_query", "new_query_reads"} & warm.keys()
    assert rounds_stats([]) == {}

"""Episodic chunking: topic-sized, overlapping, tool groups whole, provenance kept."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.turns import TurnView
from app.memories.chunk import Chunk, ChunkTurn, chunk_turns

FLIGHT_EN = [
    "I need a flight from Berlin to Lisbon on March 3, preferably in the morning.",
    "There are two morning flights to Lisbon: TP 541 at 07:10 and LH 1166 at 09:45.",
    "Lisbon flight TP 541 sounds good, is it a direct flight from Berlin?",
    "Yes, TP 541 is a direct flight from Berlin to Lisbon, arriving at 09:55.",
]
COOKING_EN = [
    "Different question: how long should I roast a whole chicken in the oven?",
    "Roast the chicken at 200 °C for about 20 minutes per 500 g plus 20 minutes.",
    "Should the roast chicken rest after the oven, and how long?",
    "Let the chicken rest for 10 to 15 minutes so the juices settle before carving.",
]
FLIGHT_ZH = [
    "我想订一张三月三号从上海飞北京的机票，最好是上午的航班。",
    "上午从上海飞北京有两个航班：CA1501 八点起飞，MU5101 十点起飞。",
    "那就订 CA1501 的航班吧，上海飞北京大概要飞多久？",
    "CA1501 从上海飞北京大约两小时十五分钟，十点十五分到达北京。",
]
COOKING_ZH = [
    "换个话题，红烧肉应该炖多长时间比较好？",
    "红烧肉一般先焯水，然后小火慢炖四十分钟到一个小时。",
    "炖红烧肉的时候要放冰糖吗？放多少冰糖？",
    "可以放冰糖，炖一斤肉大约放二十克冰糖，颜色更亮。",
]


def conversation(*parts: Sequence[str], start: int = 0) -> list[ChunkTurn]:
    texts = [t for part in parts for t in part]
    return [
        ChunkTurn(
            seq=start + i,
            role="user" if i % 2 == 0 else "assistant",
            content=text,
            metadata={"dataset_id": f"D1:{start + i + 1}"},
        )
        for i, text in enumerate(texts)
    ]


def own_seqs(chunks: Sequence[Chunk]) -> list[set[int]]:
    """Seqs each chunk adds beyond what it carried from its predecessor."""
    result = []
    for prev, chunk in zip([None, *chunks], chunks, strict=False):
        carried = set(prev.seqs) if prev is not None and chunk.overlap_chars else set()
        result.append(set(chunk.seqs) - carried)
    return result


def test_turns_are_grouped_not_one_chunk_per_turn() -> None:
    turns = conversation(FLIGHT_EN * 3)
    chunks = chunk_turns(turns)
    assert 2 <= len(chunks) < len(turns) / 2
    assert all(len(c.text) <= 500 for c in chunks)
    assert all(len(c.seqs) >= 3 for c in chunks[:-1])


def test_lines_are_prefixed_with_role() -> None:
    chunk = chunk_turns(conversation(FLIGHT_EN[:2]))[0]
    assert chunk.text.splitlines() == [f"user: {FLIGHT_EN[0]}", f"assistant: {FLIGHT_EN[1]}"]
    assert chunk.overlap_chars == 0


def test_topic_shift_closes_a_chunk_early_english() -> None:
    turns = conversation(FLIGHT_EN, COOKING_EN)
    chunks = chunk_turns(turns, min_chars=150, max_chars=2000)
    assert len(chunks) == 2
    assert own_seqs(chunks) == [{0, 1, 2, 3}, {4, 5, 6, 7}]


def test_topic_shift_closes_a_chunk_early_chinese() -> None:
    turns = conversation(FLIGHT_ZH, COOKING_ZH)
    chunks = chunk_turns(turns, min_chars=60, max_chars=2000)
    assert own_seqs(chunks) == [{0, 1, 2, 3}, {4, 5, 6, 7}]


def test_no_shift_before_min_chars() -> None:
    turns = conversation(FLIGHT_EN[:1], COOKING_EN[:1])
    assert len(chunk_turns(turns, min_chars=200, max_chars=2000)) == 1


def test_similarity_function_drives_topic_shifts() -> None:
    calls: list[tuple[str, str]] = []

    def similarity(a: str, b: str) -> float:
        calls.append((a, b))
        return 0.0 if "chicken" in b and "chicken" not in a else 0.9

    turns = conversation(FLIGHT_EN, COOKING_EN)
    chunks = chunk_turns(turns, min_chars=150, max_chars=2000, similarity=similarity)
    assert own_seqs(chunks) == [{0, 1, 2, 3}, {4, 5, 6, 7}]
    assert calls


def test_overlap_carries_the_tail_of_the_previous_chunk() -> None:
    chunks = chunk_turns(conversation(FLIGHT_EN * 4, COOKING_EN * 4))
    assert len(chunks) >= 3
    for prev, chunk in pairwise(chunks):
        ratio = chunk.overlap_chars / len(prev.text)
        assert 0.1 <= ratio <= 0.2 + 14 / len(prev.text), ratio
        assert set(prev.seqs) & set(chunk.seqs)


def test_no_overlap_when_disabled() -> None:
    chunks = chunk_turns(conversation(FLIGHT_EN * 4), overlap=0.0)
    assert all(c.overlap_chars == 0 for c in chunks)
    assert sum(len(c.seqs) for c in chunks) == 16


def tool_call(seq: int, *ids: str, name: str = "search_flights") -> ChunkTurn:
    calls = [
        {"id": i, "type": "function", "function": {"name": name, "arguments": '{"to":"LIS"}'}}
        for i in ids
    ]
    return ChunkTurn(seq, "assistant", None, tool_calls=calls, metadata={"dataset_id": f"T{seq}"})


def tool_result(seq: int, call_id: str, text: str) -> ChunkTurn:
    return ChunkTurn(seq, "tool", text, tool_call_id=call_id, metadata={"dataset_id": f"T{seq}"})


def test_tool_call_and_results_stay_together_even_past_max() -> None:
    turns = [
        *conversation(FLIGHT_EN[:3]),
        tool_call(3, "c1", "c2"),
        tool_result(4, "c1", "flight " * 400),
        tool_result(5, "c2", "航班 " * 300),
        *conversation(FLIGHT_EN[3:], start=6),
    ]
    chunks = chunk_turns(turns, max_chars=300, tool_chars=120)
    holders = [c for c in chunks if {3, 4, 5} & set(c.seqs)]
    assert holders and all({3, 4, 5} <= set(c.seqs) for c in holders)
    whole = [c for c in holders if "→ search_flights(" in c.text]
    assert len(whole) == 1
    tool_lines = [line for line in whole[0].text.splitlines() if line.startswith("tool: ")]
    assert len(tool_lines) == 2
    assert all(len(line) <= len("tool: ") + 120 and line.endswith("…") for line in tool_lines)


def test_dataset_ids_trace_provenance() -> None:
    chunks = chunk_turns(conversation(FLIGHT_EN * 3))
    for chunk in chunks:
        assert chunk.dataset_ids == [f"D1:{s + 1}" for s in chunk.seqs]
    assert {d for c in chunks for d in c.dataset_ids} == {f"D1:{i}" for i in range(1, 13)}


def test_accepts_turn_views_and_unsorted_input_and_skips_empty_turns() -> None:
    turns = [
        TurnView(seq=2, role="user", content=COOKING_EN[0]),
        TurnView(seq=0, role="user", content=FLIGHT_EN[0], metadata={"dataset_id": "D2:1"}),
        TurnView(seq=1, role="assistant", content="   "),
    ]
    (chunk,) = chunk_turns(turns, max_chars=2000)
    assert chunk.seqs == [0, 2]
    assert chunk.dataset_ids == ["D2:1"]
    assert chunk_turns([]) == []


# --------------------------------------------------------------------------- property

WORDS = st.sampled_from(
    ["flight", "Lisbon", "seat", "hotel", "chicken", "oven", "QX7T2L", "航班", "座位", "红烧肉"]
)
TEXT = st.lists(WORDS, min_size=0, max_size=60).map(" ".join)


@st.composite
def sessions(draw: st.DrawFn) -> list[ChunkTurn]:
    turns: list[ChunkTurn] = []
    for kind in draw(st.lists(st.sampled_from(["user", "assistant", "tools", "orphan"]))):
        seq = len(turns)
        meta: dict[str, Any] = draw(st.sampled_from([{}, {"dataset_id": f"D1:{seq}"}]))
        if kind == "tools":
            ids = [f"c{seq}-{k}" for k in range(draw(st.integers(1, 3)))]
            turns.append(tool_call(seq, *ids))
            for call_id in ids:
                turns.append(tool_result(len(turns), call_id, draw(TEXT) or "{}"))
        elif kind == "orphan":
            turns.append(tool_result(seq, "gone", draw(TEXT)))
        else:
            turns.append(ChunkTurn(seq, kind, draw(TEXT), metadata=meta))
    return turns


def tool_groups(turns: Sequence[ChunkTurn]) -> list[set[int]]:
    groups = []
    for turn in turns:
        if turn.tool_calls:
            ids = {c["id"] for c in turn.tool_calls}
            groups.append({turn.seq} | {t.seq for t in turns if t.tool_call_id in ids})
    return groups


@settings(max_examples=200, deadline=None)
@given(
    turns=sessions(),
    max_chars=st.integers(120, 800),
    overlap=st.sampled_from([0.0, 0.1, 0.15, 0.2]),
)
def test_chunking_invariants(turns: list[ChunkTurn], max_chars: int, overlap: float) -> None:
    chunks = chunk_turns(turns, min_chars=max_chars // 3, max_chars=max_chars, overlap=overlap)
    with_text = {t.seq for t in turns if (t.content or "").strip() or t.tool_calls}
    by_seq = {t.seq: t for t in turns}

    # Every turn with something to say is somewhere; seqs ascend inside a chunk.
    assert {s for c in chunks for s in c.seqs} >= with_text
    assert all(c.seqs == sorted(set(c.seqs)) for c in chunks)

    # A tool call and its results are never separated by a chunk boundary.
    for group in tool_groups(turns):
        holders = [c for c in chunks if group & set(c.seqs)]
        assert all(group <= set(c.seqs) for c in holders)

    for chunk in chunks:
        # Size: a chunk outgrows max_chars only by a single oversized turn or tool group.
        own = chunk.text[chunk.overlap_chars :].lstrip("\n")
        assert len(chunk.text) <= max_chars or "\n" not in own or _is_one_tool_group(own)
        # Provenance: the dataset ids of exactly the turns in the chunk, in order.
        metas = [by_seq[s].metadata for s in chunk.seqs]
        assert chunk.dataset_ids == [m["dataset_id"] for m in metas if "dataset_id" in m]
        # Every line names its speaker.
        roles = {line.split(": ", 1)[0] for line in chunk.text.splitlines()}
        assert roles <= {"user", "assistant", "tool"}

    for prev, chunk in pairwise(chunks):
        if not overlap:
            assert chunk.overlap_chars == 0
            continue
        # Overlap: ~overlap of the previous chunk, at most one clipped line's prefix over.
        assert chunk.overlap_chars <= (overlap + 0.05) * len(prev.text) + 14
        assert chunk.overlap_chars >= 0.67 * overlap * len(prev.text) - 1
        carried = chunk.text[: chunk.overlap_chars].splitlines()
        assert prev.text.endswith(carried[-1].partition(": ")[2].removeprefix("…"))


def _is_one_tool_group(text: str) -> bool:
    lines = text.splitlines()
    return lines[0].startswith("assistant: → ") and all(
        line.startswith(("tool: ", "assistant: → ")) for line in lines
    )

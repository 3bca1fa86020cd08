"""Long-term memory operations over the memories store: add, search, and the retrieval
that feeds /context. Embedding never happens here on a write (the worker does it);
a search embeds at most its query."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core.jobs import JobKind
from app.memories.bm25 import index_terms, search_terms
from app.memories.fuse import rrf
from app.memories.lexical import normalize
from app.providers.embed import Embedder, EmbeddingModelMismatch, LocalEmbedder
from app.stores import memories as repo
from app.stores import queue, sessions
from app.stores.engine import driver_connection
from app.stores.memories import MemoryRow

CANDIDATES_PER_LIST = 20


def text_key(text: str) -> str:
    """Identity of a memory's wording: equal after normalisation means a restatement."""
    return hashlib.blake2b(normalize(" ".join(text.split())).encode(), digest_size=16).hexdigest()


EMBED_JOB_KEY_PREFIX = "embed_memories:"


def embed_job_key(user_pk: int) -> str:
    return f"{EMBED_JOB_KEY_PREFIX}{user_pk}"


@dataclass(frozen=True)
class Added:
    memory: MemoryRow
    created: bool  # False: an equal memory existed and was confirmed instead


async def add_memory(
    conn: AsyncConnection,
    *,
    tenant: str,
    user: str,
    text: str,
    kind: str,
    pinned: bool,
    ttl_days: int | None,
    metadata: dict[str, Any],
    source: dict[str, Any],
    max_attempts: int,
) -> Added:
    """Store a memory (or confirm the same one), and have the worker embed it."""
    memory = repo.MemoryToAdd(
        tenant=tenant,
        user=user,
        kind=kind,
        text=text,
        text_key=text_key(text),
        pinned=pinned,
        ttl_days=None if pinned else ttl_days,
        source=source,
        metadata=metadata,
        terms=index_terms(text),
        embed_job=queue.JobWanted(kind=JobKind.EMBED_MEMORIES, max_attempts=max_attempts),
        embed_key_prefix=EMBED_JOB_KEY_PREFIX,
    )

    # One statement for a user already known (the memory, its postings and its
    # embedding job: atomic on its own, so the caller may run it in autocommit);
    # a first-seen user is created first.
    added = await repo.add_memory(conn, memory)
    if added is None:
        await sessions.ensure_user(conn, tenant=tenant, user=user)
        added = await repo.add_memory(conn, memory)
        assert added is not None
    return Added(added.memory, created=added.created)


def embed_query(embedder: Embedder, query: str) -> asyncio.Future[list[float]]:
    """The vector of ``query``, its embedding started now: it runs (in the embedder's
    thread, or over HTTP) while the caller's round trips to Postgres do. An embedder
    that starts one text at once (``embed_soon``: ours) is asked so, without a task
    of its own around it."""
    soon = getattr(embedder, "embed_soon", None)
    if soon is not None:
        return cast(asyncio.Future[list[float]], soon(query))
    return asyncio.ensure_future(_vector_of(embedder, query))


async def _vector_of(embedder: Embedder, query: str) -> list[float]:
    [vector] = await embedder.embed([query])
    return vector


async def embed_beside(embedder: Embedder, query: str) -> asyncio.Future[list[float]]:
    """The embedding of ``query`` for a caller whose first statement has been handed to
    the event loop to send. An embedder computing in this process runs its forward
    pass here, after that statement has gone out, while Postgres answers it (one of two
    cores each); any other (an HTTP service), or one that would wait, is started as
    ``embed_query``."""
    if _computes_here(embedder):
        embedder = cast(LocalEmbedder, embedder)
        await asyncio.sleep(0)  # the statement's task runs first: it is sent
        done: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        try:
            vector = embedder.embed_here(query)
        except Exception as exc:  # delivered where the vector is awaited, as embed's
            done.set_exception(exc)
            return done
        if vector is not None:
            done.set_result(vector)
            return done
    return embed_query(embedder, query)


def _computes_here(embedder: Embedder) -> bool:
    # Not isinstance(embedder, LocalEmbedder): a runtime-checkable protocol's check
    # looks up each of its members, 15-40 µs a search.
    return hasattr(embedder, "embed_here")


def _settle(embedding: asyncio.Future[Any]) -> None:
    """An embedding (or a statement) nobody will await: cancelled if still running, its
    failure marked as seen (it was raised to the caller already, or is moot)."""
    if not embedding.done():
        embedding.cancel()
    elif not embedding.cancelled():
        embedding.exception()


async def search_memories(
    conn: AsyncConnection | asyncpg.Connection,
    *,
    tenant: str,
    user: str,
    query: str,
    k: int,
    kind: str | None = None,
    embedder: Embedder | None = None,
) -> list[MemoryRow] | None:
    """The user's best matches for ``query`` (None: no such user).

    Two round trips: the user lookup with the lexical leg, then the vector leg. The
    query is embedded while the first is answered: the query vector is the search's
    costliest step (a USE forward pass, or a round trip to an embedding service), and
    it needs nothing from the database. The first statement is sent before, and a
    local model's pass runs on this thread meanwhile (``embed_beside``).
    """
    # every statement of the search reads through the driver
    db = conn if isinstance(conn, asyncpg.Connection) else await driver_connection(conn)
    terms = search_terms(query)
    # An embedding service's request goes out before the first statement: it is the
    # longer of the two legs (the first statement is answered under it).
    embedding: asyncio.Future[list[float]] | None = None
    if embedder is not None and not _computes_here(embedder):
        embedding = embed_query(embedder, query)
    first = asyncio.ensure_future(
        repo.lexical_ranking_for_user(
            db,
            tenant=tenant,
            user=user,
            terms=terms,
            k=max(k, CANDIDATES_PER_LIST),
            kind=kind,
        )
    )
    try:
        if embedder is not None and embedding is None:
            embedding = await embed_beside(embedder, query)
        found = await first
    except BaseException:
        _settle(first)  # cancelled with the search, as an awaited statement would be
        if embedding is not None:
            _settle(embedding)
        raise
    if found is None:
        if embedding is not None:
            _settle(embedding)
        return None
    user_pk, lexical = found
    return await hybrid_search(
        db,
        user_pk=user_pk,
        query=query,
        k=k,
        kind=kind,
        embedder=embedder,
        embedding=embedding,
        lexical=lexical if terms else None,  # no terms: no lexical ranking, as before
    )


async def hybrid_search(
    conn: AsyncConnection | asyncpg.Connection,
    *,
    user_pk: int,
    query: str,
    k: int,
    kind: str | None = None,
    embedder: Embedder | None = None,
    query_vector: list[float] | None = None,
    embedding: asyncio.Future[list[float]] | None = None,
    lexical: repo.Ranking | None = None,
    terms: list[str] | None = None,
) -> list[MemoryRow]:
    """Vector and lexical candidates of one user, fused by reciprocal rank.

    The query is embedded while Postgres answers the lexical leg: the search waits
    for the slower of the two, not both. A local model's forward pass runs on this
    thread once the lexical statement has gone out (``embed_beside``: no hand-off to a
    thread and back, which on a busy machine waits for a core twice); any other
    embedder runs its own way (a thread, HTTP).
    ``embedding``: that embedding, already started by the caller (``embed_query``);
    ``lexical``: the lexical leg's ranking, already read by the caller; ``terms``:
    ``search_terms(query)``, when the caller has them already.
    """
    if lexical is not None:
        terms = []
    elif terms is None:
        terms = search_terms(query)
    # both legs read through the driver
    db = conn if isinstance(conn, asyncpg.Connection) else await driver_connection(conn)
    first = (
        asyncio.ensure_future(
            repo.lexical_ranking(
                db, user_pk=user_pk, terms=terms, k=max(k, CANDIDATES_PER_LIST), kind=kind
            )
        )
        if terms
        else None
    )
    ranked: repo.Ranking | None = None
    try:
        if embedding is None and query_vector is None and embedder is not None:
            # After the lexical statement is sent (a local model's pass runs here
            # meanwhile); with no lexical statement, in the embedder's own way.
            embedding = (
                await embed_beside(embedder, query)
                if first is not None
                else embed_query(embedder, query)
            )
        if first is not None:
            ranked = await first
        if embedding is not None:
            query_vector = await embedding
    except BaseException:
        if first is not None:
            _settle(first)  # cancelled with the search, as an awaited statement would be
        raise
    finally:
        if embedding is not None:
            _settle(embedding)  # the lexical leg failed first, or the vector is read
    # Each leg's memories by id (the lexical leg's where both have one: the same row);
    # only those the fusion keeps are built.
    legs: list[repo.Ranking] = []
    if query_vector is not None and embedder is not None:
        legs.append(
            await repo.vector_ranking(
                db,
                user_pk=user_pk,
                query=query_vector,
                model=embedder.model_id,
                k=max(k, CANDIDATES_PER_LIST),
                kind=kind,
            )
        )
    if ranked is not None:
        legs.append(ranked)
    elif lexical is not None:
        legs.append(lexical)
    ids = [[str(mid) for mid in leg.ids()] for leg in legs]
    where = {
        mid: (leg, at)
        for leg, leg_ids in zip(legs, ids, strict=True)
        for at, mid in enumerate(leg_ids)
    }
    fused = rrf(ids)
    kept = [(where[mid], score) for mid, score in fused[:k]]
    return [leg.row(at, round(score, 6)) for (leg, at), score in kept]


def age_label(when: datetime, now: datetime) -> str:
    """'today', '3d ago', '5w ago', '2y ago': how old a memory is, for the context."""
    days = max(0, (now - when).days)
    if days == 0:
        return "today"
    if days < 14:
        return f"{days}d ago"
    if days < 365:
        return f"{days // 7}w ago"
    return f"{days // 365}y ago"


async def check_stored_models(conn: AsyncConnection, embedder: Embedder) -> None:
    """Refuse to run against vectors of another model: they would be silently mixed."""
    others = await repo.other_models(conn, model=embedder.model_id)
    if others:
        found = ", ".join(f"{model} ({n} memories)" for model, n in others)
        raise EmbeddingModelMismatch(
            f"stored memories were embedded with {found}, but the configured embedder is"
            f" {embedder.model_id}. Run `mnemo reembed` to recompute them with the configured"
            " model, or configure the model they were made with."
        )


async def reembed(conn: AsyncConnection, embedder: Embedder, *, max_attempts: int) -> int:
    """Drop vectors of other models and queue their users' embedding jobs; returns rows."""
    rows = await repo.forget_embeddings(conn, model=embedder.model_id)
    await sessions.forget_turn_embeddings(conn)
    for tenant, user_pk in set(rows):
        await queue.enqueue(
            conn,
            tenant_id=tenant,
            session_id=None,
            kind=JobKind.EMBED_MEMORIES,
            payload={"user_pk": user_pk},
            max_attempts=max_attempts,
            dedup_key=embed_job_key(user_pk),
        )
    return len(rows)

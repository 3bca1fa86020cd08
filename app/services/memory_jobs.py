"""Worker jobs of long-term memory: embed, index a session's episodes, promote, sweep.

Embedding runs here, batched, never on the ingest path. Each job computes
outside any transaction and writes through ``JobContext.commit``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.compression.state import TaskState
from app.compression.triggers import topic_drift
from app.core.config import Settings
from app.core.tokens import count_tokens
from app.core.turns import TurnView
from app.memories.bm25 import index_terms
from app.memories.chunk import chunk_turns, speaker_of
from app.memories.promote import (
    Confirm,
    ExistingMemory,
    Insert,
    Supersede,
    decide,
    select_candidates,
    vector_similarity,
)
from app.memories.when import resolve_relative
from app.providers.embed import Embedder
from app.services.jobs import Handler, JobContext
from app.services.memories import text_key
from app.stores import memories as repo
from app.stores import queue
from app.stores.rows import json_value, turn_view

log = logging.getLogger(__name__)

EMBED_BATCH = 64
SIMILAR_EXISTING = 8


@dataclass
class MemoryDeps:
    settings: Settings
    embedder: Embedder


def parse_vector(value: Any) -> list[float]:
    return [float(x) for x in (json.loads(value) if isinstance(value, str) else value)]


# ---------------------------------------------------------------- embed_memories


def embed_memories_handler(deps: MemoryDeps) -> Handler:
    async def handle(ctx: JobContext) -> None:
        user_pk = int(ctx.job.payload["user_pk"])
        while True:
            async with ctx.engine.connect() as conn:
                pending = await repo.pending_embeddings(conn, user_pk=user_pk, batch=EMBED_BATCH)
            if not pending:
                return
            vectors = await deps.embedder.embed([t for _, t in pending])

            async def apply(conn: AsyncConnection, pending=pending, vectors=vectors) -> None:
                for (memory_id, _), vector in zip(pending, vectors, strict=True):
                    await repo.set_embedding(
                        conn, memory_id=memory_id, embedding=vector, model=deps.embedder.model_id
                    )

            if len(pending) < EMBED_BATCH:
                await ctx.commit(apply)
                return
            async with ctx.engine.begin() as conn:  # more to come: commit this batch alone
                await apply(conn)

    return handle


# ---------------------------------------------------------------- index_session

INDEX_HEAD = text("""
    SELECT s.id, s.tenant_id, s.external_id, s.user_id, s.episode_seq, s.last_user_seq,
           s.live_turns, s.turn_count, ts.state -> 'goal' ->> 'text' AS goal
    FROM sessions s LEFT JOIN task_states ts ON ts.session_id = s.id
    WHERE s.id = :sid
""")

# Below this cosine (USE) between the session's goal and the newest user request, the
# talk has moved elsewhere. Measured: terse on-topic follow-ups to a goal score
# 0.15–0.25 ("Use the reviews from 2024 only."), an unrelated request 0.07. A false
# alarm costs one early compression, never information.
DRIFT_THRESHOLD = 0.1

# The turns not yet covered by a closed episode, oldest first.
UNINDEXED_TURNS = text("""
    SELECT seq, role, content, tool_calls, tool_call_id, name, metadata, created_at
    FROM turns WHERE session_id = :sid AND seq > :after ORDER BY seq
""")

DROP_OPEN_EPISODES = text("""
    DELETE FROM memories
    WHERE session_id = :sid AND kind = 'episode' AND (metadata->>'open')::boolean
""")

INSERT_EPISODE = text(f"""
    WITH m AS (
        INSERT INTO memories (tenant_id, user_id, kind, text, text_key, source, metadata,
                              session_id, ttl_days, expires_at, terms, embedding,
                              embedding_model, embedding_dim, turn_seq)
        VALUES (:tenant, :user_pk, 'episode', :text, :text_key, CAST(:source AS jsonb),
                CAST(:metadata AS jsonb), :sid, :ttl_days,
                now() + make_interval(days => :ttl_days), CAST(:terms AS text[]),
                CAST(:embedding AS vector), :model, :dim, CAST(:turn_seq AS integer))
        RETURNING id, user_id, kind)
    {repo.POSTINGS}
""")

SET_SESSION_INDEX = text("""
    UPDATE sessions SET episode_seq = greatest(episode_seq, :episode_seq),
        last_user_seq = coalesce(:last_user_seq, last_user_seq),
        last_user_embedding = coalesce(CAST(:last_user_embedding AS vector), last_user_embedding)
    WHERE id = :sid
""")


@dataclass(frozen=True)
class IndexRow:
    """One memory written by ``index_session``: an episode or a single turn."""

    text: str
    source: dict[str, Any]
    metadata: dict[str, Any]


def index_rows(
    turns: list[TurnView], *, session_external: str, closed_through: int
) -> tuple[list[IndexRow], int]:
    """What indexing writes for ``turns`` (oldest first): topic episodes and single turns.

    Both are dated from their turns' ``created_at`` (``source.from``/``to``) and their
    text has relative dates ("yesterday", "上周") resolved against the turn's own date.
    A single turn is "Speaker: text" (the unit that packs the most evidence per token);
    an episode keeps a question with its answer and a topic's context. Rows whose
    turns may still change (the open last episode, the turns after ``closed_through``)
    are marked open and redone by the next run. Returns the rows and the seq through
    which everything is closed.
    """
    dated = [
        replace(t, content=resolve_relative(t.content, t.created_at)) if t.content else t
        for t in turns
    ]
    chunks = chunk_turns(dated)
    closed = chunks[-2].seqs[-1] if len(chunks) >= 2 else closed_through
    rows: list[IndexRow] = []
    for i, chunk in enumerate(chunks):
        rows.append(
            IndexRow(
                chunk.text,
                {
                    "session_id": session_external,
                    "seqs": chunk.seqs,
                    "dataset_ids": chunk.dataset_ids,
                    **_time_range(turns, chunk.seqs),
                },
                {"open": i == len(chunks) - 1},
            )
        )
    for turn in dated:
        content = " ".join((turn.content or "").split())
        if turn.role not in ("user", "assistant") or not content:
            continue
        dataset_id = (turn.metadata or {}).get("dataset_id")
        rows.append(
            IndexRow(
                f"{speaker_of(turn)}: {content}",
                {
                    "session_id": session_external,
                    "seqs": [turn.seq],
                    "dataset_ids": [str(dataset_id)] if dataset_id is not None else [],
                    "role": turn.role,
                    **_time_range(turns, [turn.seq]),
                },
                {
                    "open": turn.seq > closed,
                    "granularity": "turn",
                    "tokens": count_tokens(f"{speaker_of(turn)}: {content}\n"),
                },
            )
        )
    return rows, closed


def index_session_handler(deps: MemoryDeps) -> Handler:
    """Index new turns as episodes and single turns (open rows are redone next time),
    embed them, and embed the newest user turn so /context can reuse it."""

    async def handle(ctx: JobContext) -> None:
        sid = ctx.job.session_id
        async with ctx.engine.connect() as conn:
            head = (await conn.execute(INDEX_HEAD, {"sid": sid})).first()
            if head is None:
                return
            rows = (
                await conn.execute(UNINDEXED_TURNS, {"sid": sid, "after": head.episode_seq})
            ).all()
        if not rows:
            return
        turns = [turn_view(r) for r in rows]
        indexed, closed_through = index_rows(
            turns, session_external=head.external_id, closed_through=head.episode_seq
        )
        users = [t for t in turns if t.role == "user" and t.content]
        newest_user = users[-1] if users and users[-1].seq != head.last_user_seq else None
        texts = [r.text for r in indexed] + ([newest_user.content or ""] if newest_user else [])
        settings = deps.settings
        # Topic drift is decided here, where the newest user turn gets embedded anyway
        # (never on the ingest path): far from the goal, the old task state is compressed.
        watch_drift = bool(
            newest_user
            and head.goal
            and head.turn_count >= settings.min_turns_before_compression
            and head.live_turns > settings.working_window_turns
        )
        to_embed = texts + ([head.goal] if watch_drift else [])
        vectors = await deps.embedder.embed(to_embed) if to_embed else []
        drift = None
        if watch_drift and newest_user is not None:
            goal_vector = vectors.pop()
            state = TaskState.model_validate({"goal": {"key": "goal", "text": head.goal}})
            drift = topic_drift(
                [newest_user],
                state,
                vector_similarity({head.goal: goal_vector, newest_user.content or "": vectors[-1]}),
                DRIFT_THRESHOLD,
            )
        ttl = deps.settings.memory_ttl_days

        async def apply(conn: AsyncConnection) -> None:
            await conn.execute(DROP_OPEN_EPISODES, {"sid": sid})
            for row, vector in zip(indexed, vectors, strict=False):
                terms = index_terms(row.text)
                await conn.execute(
                    INSERT_EPISODE,
                    {
                        "tenant": head.tenant_id,
                        "user_pk": head.user_id,
                        "text": row.text,
                        "text_key": text_key(row.text),
                        "source": json.dumps(row.source, ensure_ascii=False),
                        "metadata": json.dumps(row.metadata),
                        "sid": sid,
                        "ttl_days": ttl,
                        **repo.postings(terms),
                        "terms": terms,
                        "turn_seq": row.source["seqs"][0]
                        if row.metadata.get("granularity") == "turn"
                        else None,
                        "embedding": repo.vector_literal(vector),
                        "model": deps.embedder.model_id,
                        "dim": len(vector),
                    },
                )
            if drift is not None:
                await queue.enqueue(
                    conn,
                    tenant_id=head.tenant_id,
                    session_id=sid,
                    kind="compress",
                    payload={"trigger": "topic_drift", "detail": drift},
                    max_attempts=settings.job_max_attempts,
                )
            await conn.execute(
                SET_SESSION_INDEX,
                {
                    "sid": sid,
                    "episode_seq": closed_through,
                    "last_user_seq": newest_user.seq if newest_user else None,
                    "last_user_embedding": repo.vector_literal(vectors[-1])
                    if newest_user
                    else None,
                },
            )

        await ctx.commit(apply)

    return handle


def _time_range(turns: list[TurnView], seqs: list[int]) -> dict[str, str]:
    """When the turns of ``seqs`` happened ("from"/"to", RFC 3339), for dating memories."""
    wanted = set(seqs)
    times = sorted(t.created_at for t in turns if t.seq in wanted and t.created_at)
    return {"from": times[0].isoformat(), "to": times[-1].isoformat()} if times else {}


# ---------------------------------------------------------------- promote

PROMOTE_HEAD = text("""
    SELECT s.tenant_id, s.external_id, s.user_id, s.promoted_seq, ts.state
    FROM sessions s JOIN task_states ts ON ts.session_id = s.id
    WHERE s.id = :sid
""")

SET_PROMOTED = text("""
    UPDATE sessions SET promoted_seq = greatest(promoted_seq, :seq) WHERE id = :sid
""")

# similar_existing: a user's live curated memories nearest to a vector, with theirs.
SIMILAR_EXISTING_SQL = text("""
    SELECT id, kind, text, embedding FROM memories
    WHERE user_id = :user_pk AND superseded_by IS NULL AND kind <> 'episode'
      AND embedding IS NOT NULL AND embedding_model = :model
    ORDER BY (embedding <=> CAST(:q AS vector)) + 0
    LIMIT :k
""")


def promote_handler(deps: MemoryDeps) -> Handler:
    """Carry a compressed session's standing facts into the user's long-term memory."""

    async def handle(ctx: JobContext) -> None:
        async with ctx.engine.connect() as conn:
            head = (await conn.execute(PROMOTE_HEAD, {"sid": ctx.job.session_id})).first()
        if head is None:
            return
        state = TaskState.model_validate(json_value(head.state))
        # Only what has new evidence since the last promotion: a compression re-renders
        # the whole state, and re-promoting it would "confirm" facts nobody restated.
        candidates = [
            c for c in select_candidates(state) if max(c.source_seqs, default=0) > head.promoted_seq
        ]
        through = max(state.last_seq, head.promoted_seq)
        if not candidates:

            async def mark(conn: AsyncConnection) -> None:
                await conn.execute(SET_PROMOTED, {"sid": ctx.job.session_id, "seq": through})

            await ctx.commit(mark)
            return
        model = deps.embedder.model_id
        vectors = dict(
            zip(
                [c.text for c in candidates],
                await deps.embedder.embed([c.text for c in candidates]),
                strict=True,
            )
        )
        plans = []
        async with ctx.engine.connect() as conn:
            for candidate in candidates:
                rows = (
                    await conn.execute(
                        SIMILAR_EXISTING_SQL,
                        {
                            "user_pk": head.user_id,
                            "model": model,
                            "k": SIMILAR_EXISTING,
                            "q": repo.vector_literal(vectors[candidate.text]),
                        },
                    )
                ).all()
                existing = [ExistingMemory(id=r.id, text=r.text, kind=r.kind) for r in rows]
                known = {**vectors, **{r.text: parse_vector(r.embedding) for r in rows}}
                decision = decide(
                    candidate,
                    existing,
                    similarity=vector_similarity(known),
                    threshold=deps.settings.restatement_threshold,
                )
                plans.append((candidate, decision))

        async def apply(conn: AsyncConnection) -> None:
            for candidate, decision in plans:
                if isinstance(decision, Confirm):
                    await repo.confirm(
                        conn,
                        memory_id=decision.memory_id,
                        user_pk=head.user_id,
                        pinned=candidate.pinned,
                    )
                    continue
                new_id = await repo.insert_memory(
                    conn,
                    tenant=head.tenant_id,
                    user_pk=head.user_id,
                    kind=candidate.kind,
                    text_=candidate.text,
                    text_key=text_key(candidate.text),
                    pinned=candidate.pinned,
                    ttl_days=None if candidate.pinned else deps.settings.memory_ttl_days,
                    source={"session_id": head.external_id, "seqs": candidate.source_seqs},
                    metadata={"promoted": True, "emphasized": candidate.emphasized},
                    terms=index_terms(candidate.text),
                )
                await repo.set_embedding(
                    conn, memory_id=new_id, embedding=vectors[candidate.text], model=model
                )
                if isinstance(decision, Supersede):
                    await repo.supersede(
                        conn, old_id=decision.memory_id, new_id=new_id, user_pk=head.user_id
                    )
                else:
                    assert isinstance(decision, Insert)
            await conn.execute(SET_PROMOTED, {"sid": ctx.job.session_id, "seq": through})

        await ctx.commit(apply)

    return handle


# ---------------------------------------------------------------- sweep


async def sweep_expired(engine: AsyncEngine) -> int:
    """Hard-delete expired memories (pinned ones never expire); returns how many."""
    total = 0
    while True:
        async with engine.begin() as conn:
            deleted = await repo.sweep_expired(conn)
        total += deleted
        if deleted < 10_000:
            return total

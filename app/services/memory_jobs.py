"""Worker jobs of long-term memory: embed, index a session's episodes, promote, sweep.

Embedding runs here, batched, never on the ingest path. Each job computes
outside any transaction and writes through ``JobContext.commit``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.compression.live_notes import RULES_STAMP, units_record
from app.compression.state import TaskState
from app.compression.triggers import goal_drift, watches_drift
from app.core.config import Settings
from app.core.jobs import JobKind
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
from app.services.jobs import JobContext, job
from app.services.memories import text_key
from app.stores import memories as repo
from app.stores import queue, sessions
from app.stores.engine import autocommit
from app.stores.queue import Job

log = logging.getLogger(__name__)

EMBED_BATCH = 64  # memories per model call
EMBED_JOBS_PER_BATCH = 64  # embedding jobs (users) claimed together
# Index jobs (sessions) claimed together. Few: a batch holds a worker slot until its
# last session is written, and a compression (claimed first, but only into a free slot)
# waits for it; the model call per batch saves little, the one insert per session saves
# the most, whatever the batch.
INDEX_JOBS_PER_BATCH = 4
SIMILAR_EXISTING = 8


@dataclass
class MemoryDeps:
    settings: Settings
    embedder: Embedder


async def flip_heavy(ctx: JobContext, user_pks: Sequence[int]) -> None:
    """After a job wrote memories of ``user_pks``: the rows of those now heavy move
    into the HNSW index, after the job's own transaction, so that the job's write never
    waits for a heavy user's first move."""
    await move_heavy(ctx.engine, tenant=ctx.job.tenant_id, user_pks=user_pks)


async def move_heavy(engine: AsyncEngine, *, tenant: str, user_pks: Sequence[int]) -> int:
    """The rows of those of ``user_pks`` that are heavy moved into the HNSW index, one
    batch (``repo.FLIP_BATCH`` rows) a transaction, until a batch comes up short; how many
    rows moved. Each batch holds its rows only while it writes them: a write to the user
    waits for one batch at most, and a move cut short is resumed by the next."""
    total = 0
    while True:
        async with engine.begin() as conn:
            moved = await repo.flip_heavy(
                conn, tenant=tenant, user_pks=user_pks, batch=repo.FLIP_BATCH
            )
        total += moved
        if moved < repo.FLIP_BATCH:
            return total


# ---------------------------------------------------------------- embed_memories


@job(JobKind.EMBED_MEMORIES, batch=EMBED_JOBS_PER_BATCH)
async def embed_memories(ctx: JobContext, deps: MemoryDeps) -> None:
    """Vectors for the memories without one of the users of the claimed jobs (a batch of
    one tenant's users): one model call and one write per ``EMBED_BATCH`` memories."""
    tenant = ctx.job.tenant_id
    users = sorted({int(j.payload["user_pk"]) for j in ctx.jobs})
    while True:
        async with autocommit(ctx.engine) as conn:  # one read: no BEGIN/ROLLBACK
            pending = await repo.pending_embeddings(
                conn, tenant=tenant, user_pks=users, batch=EMBED_BATCH
            )
        if not pending:
            break
        vectors = await deps.embedder.embed([t for _, t in pending])

        async def apply(
            conn: AsyncConnection,
            pending: list[tuple[int, str]] = pending,
            vectors: list[list[float]] = vectors,
        ) -> None:
            await repo.set_embeddings(
                conn,
                tenant=tenant,
                embeddings=[
                    (memory_id, v) for (memory_id, _), v in zip(pending, vectors, strict=True)
                ],
                model=deps.embedder.model_id,
            )

        if len(pending) < EMBED_BATCH:
            await ctx.commit(apply)
            break
        async with ctx.engine.begin() as conn:  # more to come: commit this batch alone
            await apply(conn)
    await flip_heavy(ctx, users)


# ---------------------------------------------------------------- index_session


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


@dataclass(frozen=True)
class IndexRun:
    """What indexing derived from one session's new turns, before any vector."""

    head: sessions.IndexHead
    read: sessions.IndexRead
    rows: list[IndexRow]
    closed_through: int
    newest_user: TurnView | None  # embedded too, for /context to reuse
    watch_drift: bool  # the goal is embedded too, to tell a drift from it
    # What each new user turn states (row id, ``live_notes.units_record``): read once
    # here rather than by every context read that finds the turn live.
    units: list[tuple[int, str]] = field(default_factory=list)

    @property
    def texts(self) -> list[str]:
        """What this run needs embedded."""
        return (
            [r.text for r in self.rows]
            + ([self.newest_user.content or ""] if self.newest_user else [])
            + ([self.head.goal or ""] if self.watch_drift else [])
        )


def plan_index(
    head: sessions.IndexHead,
    turns: list[TurnView],
    newest_pk: int,
    settings: Settings,
    unread: Sequence[tuple[int, str]] = (),
) -> IndexRun:
    """What to write for ``turns``; ``unread``: (row id, text) of the user turns among
    them whose units are not stored yet."""
    rows, closed_through = index_rows(
        turns, session_external=head.external_id, closed_through=head.episode_seq
    )
    users = [t for t in turns if t.role == "user" and t.content]
    newest_user = users[-1] if users and users[-1].seq != head.last_user_seq else None
    # Topic drift is checked here, where the newest user turn gets embedded anyway
    # (never on the ingest path): far from the goal, the old task state is compressed.
    watch_drift = newest_user is not None and watches_drift(
        goal=head.goal or "",
        turn_count=head.turn_count,
        live_turns=head.live_turns,
        min_turns=settings.min_turns_before_compression,
        working_window=settings.working_window_turns,
    )
    return IndexRun(
        head=head,
        read=sessions.IndexRead(
            session_pk=head.id, turn_pk=newest_pk, episode_seq=head.episode_seq
        ),
        rows=rows,
        closed_through=closed_through,
        newest_user=newest_user,
        watch_drift=watch_drift,
        units=[(pk, units_record(said)) for pk, said in unread],
    )


def _drift(run: IndexRun, vectors: dict[str, list[float]]) -> str | None:
    if not run.watch_drift or run.newest_user is None:
        return None
    goal, said = run.head.goal or "", run.newest_user.content or ""
    return goal_drift(
        goal, run.newest_user, vector_similarity({goal: vectors[goal], said: vectors[said]})
    )


@job(JobKind.INDEX_SESSION, batch=INDEX_JOBS_PER_BATCH)
async def index_session(ctx: JobContext, deps: MemoryDeps) -> None:
    """Index the new turns of the claimed jobs' sessions (a batch of one tenant's) as
    episodes and single turns (open rows are redone next time), embed them, and embed
    each session's newest user turn so /context can reuse it: one model call for the
    batch, then each session's rows, marks and job in one transaction of its own, with
    one statement per table. One transaction per session, not one for the batch: it
    locks its session's row (posts to the session wait for it) for as long as it
    writes, and a batch's writes take as many times as long as one session's."""
    runs: list[tuple[Job, IndexRun]] = []
    async with ctx.engine.connect() as conn:
        for claimed in sorted(ctx.jobs, key=lambda j: j.session_id or 0):
            head = await sessions.index_head(conn, session_pk=claimed.session_id)
            if head is None:
                continue  # the session was deleted meanwhile
            turns, newest_pk, unread = await sessions.turns_after_marked(
                conn, session_pk=head.id, after_seq=head.episode_seq, rules=RULES_STAMP
            )
            if turns and newest_pk is not None:
                run = plan_index(head, turns, newest_pk, deps.settings, unread)
                runs.append((claimed, run))
    if not runs:
        return
    # A text said twice (in one session or two) is embedded once.
    texts = list(dict.fromkeys(t for _, run in runs for t in run.texts))
    vectors = dict(zip(texts, await deps.embedder.embed(texts), strict=True))
    for claimed, run in runs:
        await ctx.commit(partial(_apply_index, run=run, vectors=vectors, deps=deps), of=claimed)
    await flip_heavy(ctx, [run.head.user_id for _, run in runs])


async def _apply_index(
    conn: AsyncConnection, *, run: IndexRun, vectors: dict[str, list[float]], deps: MemoryDeps
) -> None:
    """Write what ``run`` derived, unless its session was popped since it was read (the
    pop queued a new run, services/pop.py)."""
    head, settings = run.head, deps.settings
    if not await sessions.index_read_current(conn, tenant=head.tenant_id, read=run.read):
        return
    await sessions.set_turn_units(conn, session_pk=head.id, units=run.units, rules=RULES_STAMP)
    await repo.drop_open_episodes(conn, tenant=head.tenant_id, session_pk=head.id)
    await repo.insert_indexed(
        conn,
        tenant=head.tenant_id,
        rows=[
            repo.IndexedMemory(
                user_pk=head.user_id,
                session_pk=head.id,
                text=row.text,
                text_key=text_key(row.text),
                source=row.source,
                metadata=row.metadata,
                terms=index_terms(row.text),
                turn_seq=row.source["seqs"][0]
                if row.metadata.get("granularity") == "turn"
                else None,
                embedding=vectors[row.text],
            )
            for row in run.rows
        ],
        ttl_days=settings.memory_ttl_days,
        model=deps.embedder.model_id,
    )
    drift = _drift(run, vectors)
    if drift is not None:
        await queue.enqueue(
            conn,
            tenant_id=head.tenant_id,
            session_id=head.id,
            kind=JobKind.COMPRESS,
            payload={"trigger": "topic_drift", "detail": drift},
            max_attempts=settings.job_max_attempts,
        )
    newest_user = run.newest_user
    await sessions.set_index_marks(
        conn,
        tenant=head.tenant_id,
        session_pk=head.id,
        episode_seq=run.closed_through,
        last_user_seq=newest_user.seq if newest_user else None,
        last_user_embedding=vectors[newest_user.content or ""] if newest_user else None,
    )


def _time_range(turns: list[TurnView], seqs: list[int]) -> dict[str, str]:
    """When the turns of ``seqs`` happened ("from"/"to", RFC 3339), for dating memories."""
    wanted = set(seqs)
    times = sorted(t.created_at for t in turns if t.seq in wanted and t.created_at)
    return {"from": times[0].isoformat(), "to": times[-1].isoformat()} if times else {}


# ---------------------------------------------------------------- promote


@job(JobKind.PROMOTE)
async def promote(ctx: JobContext, deps: MemoryDeps) -> None:
    """Carry a compressed session's standing facts into the user's long-term memory."""

    async with ctx.engine.connect() as conn:
        head = await sessions.promote_head(conn, session_pk=ctx.job.session_id)
    if head is None:
        return
    state = TaskState.model_validate(head.state)
    # Only what has new evidence since the last promotion: a compression re-renders
    # the whole state, and re-promoting it would "confirm" facts nobody restated.
    candidates = [
        c for c in select_candidates(state) if max(c.source_seqs, default=0) > head.promoted_seq
    ]
    through = max(state.last_seq, head.promoted_seq)
    if not candidates:

        async def mark(conn: AsyncConnection) -> None:
            await sessions.set_promoted(conn, session_pk=ctx.job.session_id, seq=through)

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
            rows = await repo.similar_existing(
                conn,
                user_pk=head.user_id,
                model=model,
                query=vectors[candidate.text],
                k=SIMILAR_EXISTING,
            )
            existing = [ExistingMemory(id=r.id, text=r.text, kind=r.kind) for r in rows]
            known = {**vectors, **{r.text: r.embedding for r in rows}}
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
        await sessions.set_promoted(conn, session_pk=ctx.job.session_id, seq=through)

    await ctx.commit(apply)
    await flip_heavy(ctx, [head.user_id])


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

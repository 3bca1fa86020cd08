"""The compression job: snapshot → select turns → extract → merge → render → one commit.

Everything slow (an LLM call) happens outside any transaction. The commit locks
the session, checks that the state has not moved since the snapshot, then writes
the new state version, the audit event and the compacted flags, and marks the
job done, all at once: a crash before it changes nothing, a crash after it
leaves nothing to redo.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.audit import CompressionRecord, as_trigger
from app.compression.diff import diff_summary
from app.compression.extract.base import Extractor
from app.compression.extract.fallback import ExtractionResult, extract_with_fallback
from app.compression.extract.isolated import ExtractionDeadline
from app.compression.live_notes import RULES_STAMP, units_record
from app.compression.merge import merge, state_texts, unit_texts
from app.compression.notice import notice_line
from app.compression.render import detect_language, render_tiers
from app.compression.restore import Fragment, is_question, reasks, restore, sample_turns
from app.compression.shared import private_view
from app.compression.state import Language, TaskState, Unit, dump_units
from app.compression.triggers import TIER_FRACTIONS, select_turns, tier_for
from app.core.config import Settings
from app.core.jobs import JobKind
from app.core.permissions import Section
from app.core.tokens import count_tokens
from app.core.turns import TurnView
from app.memories.bm25 import index_terms
from app.providers.embed import Embedder, EmbeddingError
from app.providers.llm import TokenUsage, current_usage
from app.services import tasks as task_service
from app.services.jobs import JobContext, job
from app.stores import compression as repo
from app.stores import misses as misses_store
from app.stores import queue, sessions

log = logging.getLogger(__name__)

# Share of the default context budget the rendered state may take; the rest is
# for memories and the recent raw turns.
STATE_SHARE = 0.6
MANUAL_TIER = len(TIER_FRACTIONS) + 1  # "compress now" takes all but the working window


@dataclass
class CompressionDeps:
    settings: Settings
    fallback: Extractor
    primary: Extractor | None = None
    on_compressed: Callable[[CompressionRecord], None] | None = None
    # Misses the compression detected (the agent asking again for a compacted answer).
    on_misses: Callable[[int], None] | None = None
    # With an embedder, merging also dedups near-paraphrases (semantic_threshold).
    embedder: Embedder | None = None


@dataclass(frozen=True)
class Plan:
    """Which live turns one compression takes, and at which tier."""

    tier: int
    turns: list[TurnView]


def plan(snap: repo.Snapshot, *, manual: bool, working_window: int) -> Plan:
    views = [view for *_, view in snap.live]
    done = MANUAL_TIER - 1 if manual else snap.compressions
    chosen = select_turns(views, compressions_done=done, working_window=working_window)
    return Plan(tier=tier_for(done), turns=chosen)


def _dropped_note(dropped: int) -> str:
    """Recorded in the event: units (or turns) left out because they failed validation."""
    return f" [{dropped} unit(s) dropped: failed validation]" if dropped else ""


async def _extract(
    deps: CompressionDeps, turns: Sequence[TurnView], state: TaskState
) -> ExtractionResult:
    """Units of ``turns``; none, with the reason, when the extractor ran out of time.

    A turn that stalls the extractor would fail every retry of the job and leave the
    session uncompressible; its turns are compacted without units instead (they stay
    in the archive), and ``fallback_reason`` on the event says so.
    """
    try:
        return await extract_with_fallback(deps.primary, deps.fallback, turns, state)
    except ExtractionDeadline as exc:
        span = f"turns {turns[0].seq}–{turns[-1].seq}" if turns else "no turns"
        reason = f"{exc.reason}: no units from {span}"
        log.warning("compression without units: %s", reason)
        return ExtractionResult([], deps.fallback.name, reason, 0)


async def unit_embeddings(
    embedder: Embedder | None, units: Sequence[Unit], state: TaskState
) -> dict[str, Sequence[float]] | None:
    """Vectors of the texts merging compares (new units' and the state's), or None:
    no embedder, or it failed (dedup then falls back to exact keys, nothing is lost)."""
    if embedder is None:
        return None
    texts = list(dict.fromkeys(t for t in (*unit_texts(units), *state_texts(state)) if t))
    if not texts:
        return None
    try:
        vectors = await embedder.embed(texts)
    except EmbeddingError as exc:
        log.warning("no semantic dedup for this compression: %s", exc)
        return None
    return dict(zip(texts, vectors, strict=True))


def render_state(
    state: TaskState, *, settings: Settings, shared: Sequence[Section], language: str | None
) -> list[str]:
    """The session's own state rendered at shrinking budgets, largest first; without
    what it contributes to its task's shared state (shown there, once)."""
    return render_tiers(
        private_view(state, shared, settings.tool_kinds()) if shared else state,
        language=language,
        max_tokens=int(settings.context_max_tokens * STATE_SHARE),
        tool_kinds=settings.tool_kinds(),
    )


def merged_and_rendered(
    before: TaskState,
    units: list[Unit],
    *,
    settings: Settings,
    through_seq: int,
    language: Language,
    vectors: dict[str, Sequence[float]] | None,
    shared: Sequence[Section] = (),
    restored: Sequence[Fragment] = (),
) -> tuple[TaskState, str, str]:
    """The merged state (with ``restored`` archived turns pinned), its rendering (the
    tiers beyond the first kept on the state) and what changed; CPU only, in a thread."""
    state = merge(
        before,
        units,
        decay_factor=settings.decay_factor,
        through_seq=through_seq,
        language=language,
        semantic_threshold=settings.semantic_threshold,
        embeddings=vectors,
    )
    # Archived turns the agent asked for again come back, pinned.
    state = restore(state, restored, language)
    tiers = render_state(state, settings=settings, shared=shared, language=language)
    state.renderings = tiers[1:]
    rendered = tiers[0] if tiers else ""
    return state, rendered, diff_summary(before, state, language)


@job(JobKind.COMPRESS)
async def compress(ctx: JobContext, deps: CompressionDeps) -> None:
    """Snapshot, extract, merge and render outside any transaction; commit it all at once."""
    settings = deps.settings
    if ctx.job.session_id is None:
        return
    trigger = as_trigger(str(ctx.job.payload.get("trigger") or "token_threshold"))
    async with ctx.engine.connect() as conn:
        snap = await repo.snapshot(conn, session_pk=ctx.job.session_id, rules=RULES_STAMP)
        # What this session writes to its task's shared state is shown there, once.
        shared = await task_service.private_sections(conn, session_pk=ctx.job.session_id)
    if snap is None:
        return  # the session was deleted meanwhile
    chosen = plan(snap, manual=trigger == "manual", working_window=settings.working_window_turns)
    if not chosen.turns:
        return
    started = time.perf_counter()
    usage = TokenUsage()
    reset = current_usage.set(usage)
    try:
        result = await _extract(deps, chosen.turns, snap.state)
    finally:
        current_usage.reset(reset)
    # What people wrote decides the language, not tool output (JSON keys are English).
    language = snap.state.language or detect_language(
        v.content for *_, v in snap.live if v.role in ("user", "assistant", "system")
    )

    vectors = await unit_embeddings(deps.embedder, result.units, snap.state)
    archived: list[TurnView] = []
    if any(is_question(v) for v in chosen.turns):
        async with ctx.engine.connect() as conn:
            archived = await misses_store.compacted_turns(conn, session_pk=snap.session_pk)
    found = reasks(chosen.turns, archived, index_terms)

    state, rendered, change_summary = await asyncio.to_thread(
        merged_and_rendered,
        snap.state,
        result.units,
        settings=settings,
        through_seq=chosen.turns[-1].seq,
        language=language,
        vectors=vectors,
        shared=shared,
        restored=[f for r in found for f in r.fragments],
    )
    by_seq = {view.seq: (pk, ext, tokens) for pk, ext, tokens, view in snap.live}
    taken = [by_seq[v.seq] for v in chosen.turns]
    input_tokens = sum(tokens for _, _, tokens in taken)
    output_tokens = count_tokens(rendered)
    record = CompressionRecord(
        trigger=trigger,
        tier=chosen.tier,
        turn_ids=[ext for _, ext, _ in taken],
        turn_seqs=[v.seq for v in chosen.turns],
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        ratio=round(input_tokens / max(output_tokens, 1), 3),
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
        extractor=result.extractor,
        fallback_reason=result.fallback_reason,
        units=dump_units(result.units),
        rendered_state=rendered,
        change_summary=change_summary + _dropped_note(result.dropped),
        dropped_units=result.dropped,
        job_id=ctx.job.id,
        llm_prompt_tokens=usage.prompt_tokens if usage.calls else None,
        llm_completion_tokens=usage.completion_tokens if usage.calls else None,
    )

    # From now on the context read adds what the turns left live state when the packer
    # leaves them out: it reads their units, stored here once (or when indexed), outside
    # the compression's own duration.
    taken_seqs = {v.seq for v in chosen.turns}
    live_units = [
        (pk, units_record(view.content or ""))
        for pk, _, _, view in snap.live
        if pk in snap.unread and view.seq not in taken_seqs
    ]

    async def apply(conn: AsyncConnection) -> repo.Applied:
        applied = await repo.apply_compression(
            conn,
            snap=snap,
            state=state,
            rendered=rendered,
            rendered_tokens=output_tokens,
            turn_pks=[pk for pk, _, _ in taken],
            record=record,
            notice=notice_line(change_summary, language),
        )
        await sessions.set_turn_units(
            conn, session_pk=snap.session_pk, units=live_units, rules=RULES_STAMP
        )
        await task_service.contribute_in(
            conn,
            session_pk=snap.session_pk,
            units=result.units,
            private=state,
            language=language,
            settings=task_service.ContributionSettings(
                decay_factor=settings.decay_factor,
                max_tokens=int(settings.context_max_tokens * STATE_SHARE),
                tool_kinds=settings.tool_kinds(),
            ),
            event_id=applied.event_id,
        )
        for miss in found:
            seqs = [f.seq for f in miss.fragments]
            await misses_store.insert_miss(
                conn,
                tenant=snap.tenant_id,
                session_pk=snap.session_pk,
                detection="reask",
                needed=miss.question.content or "",
                restored_seqs=seqs,
                state=snap.state,
                turns=sample_turns(archived, seqs),
            )
        # What outlives the session goes to long-term memory, in its own job.
        await queue.enqueue(
            conn,
            tenant_id=snap.tenant_id,
            session_id=snap.session_pk,
            kind=JobKind.PROMOTE,
            max_attempts=settings.job_max_attempts,
        )
        return applied

    await ctx.commit(apply)
    log.info(
        "compressed %s turns of session %s: %s → %s tokens (%s)",
        len(taken),
        snap.session_pk,
        input_tokens,
        output_tokens,
        result.extractor,
        extra={"job_id": ctx.job.id, "session": snap.session_pk},
    )
    if deps.on_compressed is not None:
        deps.on_compressed(record)
    if found and deps.on_misses is not None:
        deps.on_misses(len(found))

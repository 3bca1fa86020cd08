"""The compression trigger as ingest sees it: settings bound to the pure decision.

The cheap static check (token threshold) needs nothing but the session's
counters. The dynamic ones (tool failures, repeated calls, milestones) look at
the last few live turns, and at the task state only when the batch carries a
tool call (to see whether it repeats one already done).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.state import TaskState
from app.compression.triggers import Trigger, decide_trigger
from app.core.config import Settings
from app.core.turns import PreparedTurn, TurnView
from app.services.ingest import SessionCounters, TriggerPolicy
from app.stores import compression, sessions

RECENT_WINDOW = 12


def _involves_tools(new: Sequence[tuple[int, PreparedTurn]]) -> bool:
    return any(t.role == "tool" or t.tool_calls for _, t in new)


def _views(new: Sequence[tuple[int, PreparedTurn]]) -> list[TurnView]:
    return [
        TurnView(
            seq=seq,
            role=t.role,
            content=t.content,
            tool_calls=t.tool_calls,
            tool_call_id=t.tool_call_id,
            name=t.name,
            emphasized=t.emphasized,
        )
        for seq, t in new
    ]


def policy_from_settings(settings: Settings) -> TriggerPolicy:
    budget = settings.history_budget_tokens

    def decide(
        counters: SessionCounters, recent: Sequence[TurnView], state: TaskState | None
    ) -> Trigger | None:
        return decide_trigger(
            history_tokens=counters.history_tokens,
            history_budget=budget,
            trigger_ratio=settings.trigger_ratio,
            uncompacted_turns=counters.uncompacted_turns,
            total_turns=counters.turn_count,
            min_turns=settings.min_turns_before_compression,
            recent=recent,
            consecutive_failures_threshold=settings.tool_failure_threshold,
            working_window=settings.working_window_turns,
            state=state,
        )

    async def policy(
        conn: AsyncConnection,
        counters: SessionCounters,
        new: Sequence[tuple[int, PreparedTurn]],
    ) -> str | None:
        static = decide(counters, (), None)
        if static is not None:
            return static.reason
        if not _involves_tools(new):
            # Chat alone can only be a milestone ("done!"): the new turns suffice.
            found = decide(counters, _views(new), None)
            return None if found is None else found.reason
        recent = await sessions.recent_live_turns(
            conn, session_pk=counters.session_pk, k=RECENT_WINDOW
        )
        state = None
        if any(t.tool_calls for _, t in new):
            raw = await compression.stored_state(conn, session_pk=counters.session_pk)
            state = TaskState.model_validate(raw) if raw is not None else None
        found = decide(counters, recent, state)
        return None if found is None else found.reason

    return policy

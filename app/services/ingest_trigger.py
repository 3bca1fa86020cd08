"""The compression trigger as ingest sees it: settings bound to the pure decision.

The cheap static check (token threshold) needs nothing but the session's
counters. The dynamic ones (tool failures, repeated calls, milestones) look at
the last few live turns, and at the task state only when the batch carries a
tool call (to see whether it repeats one already done).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.state import TaskState
from app.compression.triggers import Trigger, decide_trigger
from app.core.config import Settings
from app.core.turns import TurnView
from app.services.ingest import PreparedTurn, SessionCounters, TriggerPolicy
from app.stores.rows import json_value, turn_view

RECENT_WINDOW = 12

# recent_live: the newest live turns, newest first (the batch just inserted included).
RECENT_LIVE = text("""
    SELECT seq, role, content, tool_calls, tool_call_id, name, emphasized
    FROM turns WHERE session_id = :sid AND NOT compacted
    ORDER BY seq DESC LIMIT :k
""")

STATE = text("SELECT state FROM task_states WHERE session_id = :sid")


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
        rows = (
            await conn.execute(RECENT_LIVE, {"sid": counters.session_pk, "k": RECENT_WINDOW})
        ).all()
        recent = [turn_view(r) for r in reversed(rows)]
        state = None
        if any(t.tool_calls for _, t in new):
            raw = (await conn.execute(STATE, {"sid": counters.session_pk})).scalar()
            state = TaskState.model_validate(json_value(raw)) if raw else None
        found = decide(counters, recent, state)
        return None if found is None else found.reason

    return policy

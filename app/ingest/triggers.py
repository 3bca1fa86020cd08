"""The compression trigger as ingest sees it: settings bound to a pure decision."""

from __future__ import annotations

from collections.abc import Sequence

from app.core.config import Settings
from app.ingest.service import PreparedTurn, SessionCounters, TriggerPolicy


def policy_from_settings(settings: Settings) -> TriggerPolicy:
    budget = settings.history_budget_tokens

    def policy(counters: SessionCounters, new: Sequence[PreparedTurn]) -> str | None:
        if counters.uncompacted_turns < settings.min_turns_before_compression:
            return None
        if counters.history_tokens > settings.trigger_ratio * budget:
            return "token_threshold"
        return None

    return policy

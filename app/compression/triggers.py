"""When to compress and which turns to compress — pure decisions.

Triggers (``decide_trigger``), checked in this order; nothing fires while the
session has fewer than ``min_turns`` turns or nothing outside the working
window to compress (``manual`` always fires):

* ``manual`` — the client asked (``POST …/compact``);
* ``token_threshold`` — static: history tokens > ``trigger_ratio`` × budget,
  where the budget is what the context window leaves for history
  (``history_budget``);
* ``tool_failures`` — the last ``consecutive_failures_threshold`` tool results
  all failed: the agent is flailing and needs a clean state;
* ``repeated_action`` — a tool was called again with the same name and
  canonical arguments (within ``recent`` or already done in the state): the
  agent has lost track of what it did;
* ``milestone`` — a unit of work closed: the user says it is done ("done",
  "完成了"), or a successful tool call matches an open todo;
* ``topic_drift`` — only with a ``similarity`` callable: the latest user
  request is far from the goal.

Tiers (``select_turns``) grow with each compression of a session, so the
first pass is cheap and conservative and later ones are thorough:

* tier 1 (first compression): the oldest 30% of the uncompacted turns;
* tier 2 (second): the oldest 50%;
* tier 3 (every later one): everything except the working window.

The working window — the last ``working_window`` turns (3) — is never taken,
and an assistant tool call is never separated from its tool results: the cut
is extended to include them, or moved before the call if the results sit in
the working window.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from app.compression.extract.tools import calls_of, result_status
from app.compression.state import TaskState
from app.compression.text import action_key, normalize, word_set
from app.core.turns import TurnView

TriggerReason = Literal[
    "token_threshold", "milestone", "repeated_action", "tool_failures", "topic_drift", "manual"
]
TIER_FRACTIONS = (0.3, 0.5)  # then: all but the working window

_DONE = re.compile(
    r"^(?:all )?(?:done|finished|complete[d]?)\b|\bthat'?s (?:all|it|done)\b|\ball set\b"
    r"|\btask (?:is )?(?:done|complete[d]?)\b|\bwe'?re done\b|\bmilestone\b"
    r"|^(?:完成了|搞定了?|做完了|都好了|好了|结束了)|任务完成|全部完成|已全部完成|这一步完成",
    re.IGNORECASE,
)
_ASSISTANT_DONE = re.compile(
    r"\ball (?:steps|tasks) (?:are )?(?:done|complete[d]?)\b|\btask (?:is )?complete[d]?\b"
    r"|任务已完成|全部完成|所有步骤(?:都)?已完成",
    re.IGNORECASE,
)
_TOOL_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_MILESTONE_CHARS = 2_000


@dataclass(frozen=True, slots=True)
class Trigger:
    reason: TriggerReason
    detail: str = ""


def history_budget(window: int, system: int, tools: int, reserved_output: int) -> int:
    """Tokens left for conversation history once the fixed parts are paid for."""
    return max(0, window - system - tools - reserved_output)


def decide_trigger(
    *,
    history_tokens: int,
    history_budget: int,
    trigger_ratio: float = 0.8,
    uncompacted_turns: int,
    total_turns: int,
    min_turns: int = 8,
    recent: Sequence[TurnView] = (),
    consecutive_failures_threshold: int = 3,
    working_window: int = 3,
    manual: bool = False,
    state: TaskState | None = None,
    similarity: Callable[[str, str], float] | None = None,
    drift_threshold: float = 0.35,
) -> Trigger | None:
    """Why the session should be compressed now, or None.

    ``recent`` are the latest turns (e.g. the batch just ingested plus a few
    before it), oldest first; ``state`` is the current task state if any.
    """
    if manual:
        return Trigger("manual")
    if total_turns < min_turns or uncompacted_turns <= working_window:
        return None
    if history_tokens > trigger_ratio * history_budget:
        detail = f"{history_tokens} > {trigger_ratio:g} × {history_budget}"
        return Trigger("token_threshold", detail)
    failures = trailing_failures(recent)
    if failures >= consecutive_failures_threshold:
        return Trigger("tool_failures", f"{failures} consecutive tool failures")
    repeated = repeated_call(recent, state)
    if repeated is not None:
        return Trigger("repeated_action", repeated)
    milestone = reached_milestone(recent, state)
    if milestone is not None:
        return Trigger("milestone", milestone)
    if similarity is not None:
        drift = topic_drift(recent, state, similarity, drift_threshold)
        if drift is not None:
            return Trigger("topic_drift", drift)
    return None


def trailing_failures(recent: Sequence[TurnView]) -> int:
    count = 0
    for turn in reversed(recent):
        if turn.role != "tool":
            continue
        if result_status(turn.content) != "failed":
            break
        count += 1
    return count


def repeated_call(recent: Sequence[TurnView], state: TaskState | None) -> str | None:
    """The first call that repeats an identical earlier one, described; else None."""
    done: dict[str, set[str | None]] = {}
    if state is not None:
        for action in state.actions:
            if action.status == "done":
                done[action.key] = {a.call_id for a in action.attempts}
    seen: set[str] = set()
    for turn in recent:
        for call in calls_of(turn):
            key = action_key(call.tool, call.arguments)
            if key in seen:
                return f"{call.tool} called again with the same arguments"
            if key in done and call.call_id not in done[key]:
                return f"{call.tool} already done with the same arguments"
            seen.add(key)
    return None


def reached_milestone(recent: Sequence[TurnView], state: TaskState | None) -> str | None:
    for turn in recent:
        # "Done!" is said in a short message: a long one is not read whole on ingest.
        text = (turn.content or "")[:_MILESTONE_CHARS].strip()
        if turn.role == "user" and text and _DONE.search(text):
            return "user marked work done"
        if turn.role == "assistant" and text and _ASSISTANT_DONE.search(text):
            return "assistant reported the task complete"
    if state is None:
        return None
    todos = [t for t in state.todos if t.status == "open"]
    results = {t.tool_call_id: t for t in recent if t.role == "tool" and t.tool_call_id}
    for turn in recent:
        for call in calls_of(turn):
            result = results.get(call.call_id) if call.call_id else None
            if result is None or result_status(result.content) != "done":
                continue
            words = {w.lower() for w in _TOOL_WORDS.findall(call.tool) if len(w) >= 3}
            for todo in todos:
                if len(words) >= 2 and words <= word_set(todo.text):
                    return f"{call.tool} completed todo: {todo.text}"
    return None


def topic_drift(
    recent: Sequence[TurnView],
    state: TaskState | None,
    similarity: Callable[[str, str], float],
    threshold: float,
) -> str | None:
    users = [t.content for t in recent if t.role == "user" and t.content]
    if not users or len(normalize(users[-1])) < 10:
        return None
    reference = state.goal.text if state is not None and state.goal is not None else users[0]
    if reference == users[-1]:
        return None
    score = similarity(reference, users[-1])
    return f"similarity {score:.2f} < {threshold:g}" if score < threshold else None


# Below this cosine (USE) between the session's goal and the newest user request, the
# talk has moved elsewhere. Measured: terse on-topic follow-ups to a goal score
# 0.15–0.25 ("Use the reviews from 2024 only."), an unrelated request 0.07. A false
# alarm costs one early compression, never information.
DRIFT_THRESHOLD = 0.1


def watches_drift(
    *, goal: str | None, turn_count: int, live_turns: int, min_turns: int, working_window: int
) -> bool:
    """Whether a new user request is compared with the goal: there is one, the session
    is old enough to compress, and something lies outside the working window."""
    return bool(goal) and turn_count >= min_turns and live_turns > working_window


def goal_drift(goal: str, request: TurnView, similarity: Callable[[str, str], float]) -> str | None:
    """``topic_drift`` of ``request`` from the session's goal (the trigger's detail)."""
    state = TaskState.model_validate({"goal": {"key": "goal", "text": goal}})
    return topic_drift([request], state, similarity, DRIFT_THRESHOLD)


# ----------------------------------------------------------------------- tiers


def tier_for(compressions_done: int) -> int:
    return min(compressions_done, len(TIER_FRACTIONS)) + 1


def _blocks(turns: Sequence[TurnView]) -> list[tuple[int, int]]:
    """Index ranges [start, end) that must be taken whole: a tool call and its results."""
    position = {
        t.tool_call_id: i for i, t in enumerate(turns) if t.role == "tool" and t.tool_call_id
    }
    spans = []
    for i, turn in enumerate(turns):
        ids = [str(c.get("id")) for c in turn.tool_calls or ()]
        ends = [position[cid] for cid in ids if cid in position]
        spans.append((i, max([i, *ends]) + 1))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def select_turns(
    uncompacted: Sequence[TurnView], *, compressions_done: int, working_window: int = 3
) -> list[TurnView]:
    """The oldest uncompacted turns to compress now (see the tiers above)."""
    limit = len(uncompacted) - working_window
    if limit <= 0:
        return []
    tier = tier_for(compressions_done)
    if tier <= len(TIER_FRACTIONS):
        target = min(limit, max(1, math.ceil(TIER_FRACTIONS[tier - 1] * len(uncompacted))))
    else:
        target = limit
    cut = 0
    for _start, end in _blocks(uncompacted):
        if cut >= target or end > limit:
            break
        cut = end
    return list(uncompacted[:cut])

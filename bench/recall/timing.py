"""In-process compression time: rule extraction + merge + render of ~16k-token
histories generated from the benchmark sessions (medians of several runs), at the
state budget the worker renders with.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

from app.compression.extract.rules import RuleExtractor
from app.compression.merge import merge
from app.compression.render import render
from app.compression.state import TaskState
from app.core.tokens import count_message_tokens
from app.core.turns import TurnView
from app.services.compression import STATE_SHARE
from bench.scenarios import Language
from bench.sessions import generate

TIMING_TOKENS = 16_000


TIMING_RUNS = 7


def _timing_history(seed: int | str, language: Language, speech_only: bool) -> list[Any]:
    """~16k tokens of generated turns as TurnViews (optionally user/assistant text only)."""
    turns: list[TurnView] = []
    total = 0
    index = 90
    while total < TIMING_TOKENS:
        for m in generate(seed=seed, index=index, turns=500, language=language).messages:
            if speech_only and (m["role"] == "tool" or m.get("tool_calls")):
                continue
            if total >= TIMING_TOKENS:
                break
            total += count_message_tokens(m)
            turns.append(
                TurnView(
                    seq=len(turns),
                    role=m["role"],
                    content=m.get("content"),
                    tool_calls=m.get("tool_calls"),
                    tool_call_id=m.get("tool_call_id"),
                    emphasized=bool(m.get("emphasized")),
                )
            )
        index += 1
    return turns


async def _time_compression(
    turns: Sequence[Any], language: Language, budget: int
) -> list[tuple[float, float, float, float]]:
    """(extract, merge, render, CPU) seconds of each run, after one warm-up run.

    CPU is this process's time for the whole run: on a shared, loaded machine the
    wall-clock figures also hold the time spent waiting for a core."""
    extractor = RuleExtractor()
    samples = []
    for _ in range(TIMING_RUNS + 1):
        c0 = time.process_time()
        t0 = time.perf_counter()
        units = await extractor.extract(turns, TaskState())
        t1 = time.perf_counter()
        state = merge(TaskState(), units, through_seq=turns[-1].seq, language=language)
        t2 = time.perf_counter()
        render(state, language=language, max_tokens=int(budget * STATE_SHARE))
        samples.append((t1 - t0, t2 - t1, time.perf_counter() - t2, time.process_time() - c0))
    return samples[1:]


def standalone_timing(seed: int | str, budget: int) -> dict[str, Any]:
    """Rule extraction + merge + render of ~16k-token histories, in-process (medians).

    Agent sessions (tool results make most of the tokens) and speech only (every
    token goes through the sentence rules: the slow case), in both languages.
    """
    out: dict[str, Any] = {}
    cases: list[tuple[str, Language, bool]] = [
        ("en", "en", False),
        ("zh", "zh", False),
        ("en_speech", "en", True),
        ("zh_speech", "zh", True),
    ]
    for name, language, speech_only in cases:
        turns = _timing_history(seed, language, speech_only)
        samples = asyncio.run(_time_compression(turns, language, budget))
        totals = [sum(s[:3]) * 1000 for s in samples]
        out[name] = {
            "history_turns": len(turns),
            "runs": TIMING_RUNS,
            "median_ms": round(statistics.median(totals), 2),
            "min_ms": round(min(totals), 2),
            "max_ms": round(max(totals), 2),
            "median_extract_ms": round(statistics.median(s[0] for s in samples) * 1000, 2),
            "median_merge_ms": round(statistics.median(s[1] for s in samples) * 1000, 2),
            "median_render_ms": round(statistics.median(s[2] for s in samples) * 1000, 2),
            "median_cpu_ms": round(statistics.median(s[3] for s in samples) * 1000, 2),
        }
    out["median_ms"] = max(out["en"]["median_ms"], out["zh"]["median_ms"])
    out["speech_median_ms"] = max(out["en_speech"]["median_ms"], out["zh_speech"]["median_ms"])
    return out

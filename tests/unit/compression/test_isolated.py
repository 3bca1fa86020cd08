"""The rule extractor in a child process: same units, a deadline that holds even
against a match that holds the GIL, and a fresh child after a kill."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError

from app.compression.extract.isolated import (
    ExtractionCrashed,
    ExtractionDeadline,
    ExtractionProcesses,
)
from app.compression.extract.rules import extract_units
from app.compression.state import TaskState, dump_units
from tests.fakes.extractors import BROKEN, DIES, INVALID, RUNAWAY
from tests.unit.compression.test_session import EN_SESSION, ZH_SESSION

GENEROUS_S = 120.0  # a deadline no healthy extraction of these sessions comes near


@pytest.fixture
async def processes() -> AsyncIterator[ExtractionProcesses]:
    pool = ExtractionProcesses()
    yield pool
    pool.close()


@pytest.mark.parametrize("turns", [EN_SESSION, ZH_SESSION], ids=["en", "zh"])
async def test_the_child_returns_the_units_the_extractor_returns(
    processes: ExtractionProcesses, turns: list
) -> None:
    units = await processes.run(turns, TaskState(), deadline_s=GENEROUS_S)
    assert units and dump_units(units) == dump_units(extract_units(turns, TaskState()))


async def test_children_are_reused_between_calls(processes: ExtractionProcesses) -> None:
    for _ in range(3):
        await processes.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S)
    assert processes.started == 1


async def test_a_runaway_match_is_killed_at_the_deadline_and_the_loop_never_stalls(
    processes: ExtractionProcesses,
) -> None:
    await processes.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S)  # started, not timed
    loop = asyncio.get_running_loop()
    gaps: list[float] = []

    async def tick() -> None:
        last = loop.time()
        while True:
            await asyncio.sleep(0.01)
            gaps.append(loop.time() - last)
            last = loop.time()

    ticker = asyncio.create_task(tick())
    started = loop.time()
    with pytest.raises(ExtractionDeadline, match=r"0\.5 s deadline"):
        await processes.run(EN_SESSION, TaskState(), deadline_s=0.5, target=RUNAWAY)
    elapsed = loop.time() - started
    ticker.cancel()
    # In a thread the match would hold the GIL (and the loop) until it ended: never.
    # Bounds: a kill takes milliseconds; 0.3 s is the stall budget.
    assert elapsed < 3.0
    assert gaps and max(gaps) < 0.3
    units = await processes.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S)
    assert units and processes.started == 2  # the killed child was replaced


async def test_what_the_extractor_raises_is_raised_in_the_parent(
    processes: ExtractionProcesses,
) -> None:
    with pytest.raises(ValueError, match="a bug in the extractor"):
        await processes.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S, target=BROKEN)
    # A ValidationError too: the fallback leaves out the turns that cause it.
    with pytest.raises(ValidationError):
        await processes.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S, target=INVALID)
    assert await processes.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S)
    assert processes.started == 1  # the child answered each time: it is kept


async def test_a_child_that_dies_is_replaced(processes: ExtractionProcesses) -> None:
    with pytest.raises(ExtractionCrashed, match="died"):
        await processes.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S, target=DIES)
    assert await processes.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S)
    assert processes.started == 2


async def test_a_child_can_be_started_before_the_first_call() -> None:
    pool = ExtractionProcesses()
    try:
        pool.prestart()
        # Called at once: it waits for the child being started instead of a second one.
        await pool.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S)
        pool.prestart()  # a no-op once a child exists
        await pool.run(EN_SESSION, TaskState(), deadline_s=GENEROUS_S)
        assert pool.started == 1 and pool.idle == 1
    finally:
        pool.close()

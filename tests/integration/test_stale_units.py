"""A user turn's units record stored by other rules (an upgrade changed them,
``live_notes.RULES_STAMP``) is stored again by the next job that reads the turn: the
index job, the units job and a compression. A read never trusts such a record and
reads the turn from its text instead; before, nothing replaced it, so every API
process read those turns from their text for as long as they stayed live. A record
the current rules stored is left as it is. Against real Postgres."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.live_notes import RULES_STAMP
from app.core.config import Settings
from app.core.jobs import JobKind
from app.core.turns import PreparedTurn
from tests.integration.test_index_batches import _turn
from tests.integration.test_read_units import (
    RULE,
    bulk,
    compress_worker,
    enqueue,
    expected,
    index_worker,
    post,
    stored,
    units_worker,
)

OTHER_RULES = {"rules": "0123456789abcdef", "units": []}  # an older version: "nothing"


async def restamp(engine: AsyncEngine, record: dict[str, Any]) -> None:
    """Every user turn's record replaced by ``record``."""
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE turns SET units = CAST(CAST(:r AS text) AS jsonb) WHERE role = 'user'"),
            {"r": json.dumps(record)},
        )


def conversation() -> list[PreparedTurn]:
    return [
        _turn(1, "user", RULE),
        _turn(2, "assistant", "Understood."),
        _turn(3, "user", "Also, the maintenance window is Saturday 02:00-04:00 UTC."),
        _turn(4, "assistant", "Noted."),
    ]


async def test_the_index_job_stores_again_a_record_other_rules_stored(
    engine: AsyncEngine, settings: Settings
) -> None:
    turns = conversation()
    await post(engine, turns)  # read at ingest, the index job queued
    await restamp(engine, OTHER_RULES)
    assert await index_worker(engine, settings).run_once() is not None
    assert await stored(engine) == expected(turns)


async def test_the_units_job_stores_again_a_record_other_rules_stored(
    engine: AsyncEngine, settings: Settings
) -> None:
    turns = bulk()
    await post(engine, turns)
    assert await units_worker(engine, settings).run_once() is not None
    await restamp(engine, OTHER_RULES)
    await enqueue(engine, JobKind.READ_UNITS)
    assert await units_worker(engine, settings).run_once() is not None
    assert await stored(engine) == expected(turns)


async def test_a_compression_stores_again_the_records_of_the_turns_it_leaves_live(
    engine: AsyncEngine, settings: Settings
) -> None:
    turns = bulk()
    await post(engine, turns)
    assert await units_worker(engine, settings).run_once() is not None  # claimed first
    await restamp(engine, OTHER_RULES)
    compressor = compress_worker(engine, settings)
    await enqueue(engine, JobKind.COMPRESS, trigger="manual")
    assert await compressor.run_once() is not None
    async with engine.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM turns WHERE compacted"))
        live = set(
            await conn.scalars(
                text("SELECT external_id FROM turns WHERE role = 'user' AND NOT compacted")
            )
        )
    assert live  # the compression left some user turns live
    records = await stored(engine)
    want = expected(turns)
    assert {m: records[m] for m in live} == {m: want[m] for m in live}


async def test_a_record_the_current_rules_stored_is_left_as_it_is(
    engine: AsyncEngine, settings: Settings
) -> None:
    turns: Sequence[PreparedTurn] = conversation()
    await post(engine, turns)
    mine = {"rules": RULES_STAMP, "units": []}  # stored first by a run of the same rules
    await restamp(engine, mine)
    assert await index_worker(engine, settings).run_once() is not None
    records = await stored(engine)
    assert [records[f"{t.client_id}"] for t in turns if t.role == "user"] == [mine, mine]

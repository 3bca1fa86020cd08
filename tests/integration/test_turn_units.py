"""What a live user turn states is read once and stored with it (``turns.units``): by
ingest, or, for a text ingest leaves (too long), by the worker when it indexes the turn;
the context read goes by that record and reads the text itself only for a turn without
one: ingest → compact → more turns → index → /context, against real Postgres."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.compression.live_notes import RULES_STAMP, record_of, turn_units
from app.compression.state import ConstraintUnit, dump_units
from app.services.ingest import UNITS_POST_CHARS
from tests.conftest import post_turns
from tests.integration.test_change_notice import with_worker
from tests.integration.test_context_live_changes import (
    OPENING,
    REPORT,
    _compacted_then,
    _live_contents,
    _msg,
    _state_of,
)
from tests.integration.test_memory_promotion import settle

RULE = "Never restart the primary during the migration."
PLAIN = "Thanks for the update."


def _later(first: str) -> list[dict[str, Any]]:
    """``first`` as a user turn that long replies push out of a 700-token context."""
    return [
        _msg("u5", "user", first),
        _msg("a5", "assistant", "Understood."),
        *[_msg(f"r{i}", "assistant", REPORT) for i in range(4)],
        _msg("u6", "user", "Thanks, what is next?"),
    ]


@pytest.fixture
async def indexed(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its worker (hash embedder: the index job runs at once)."""
    async for c in with_worker(db_url, engine):
        yield c


@pytest.fixture
async def unindexed(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its worker, whose index jobs wait an hour: no turn is indexed."""
    async for c in with_worker(db_url, engine, index_delay_s=3600):
        yield c


@pytest.fixture
async def no_memory(db_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its worker and no long-term memory: no turn is ever indexed."""
    async for c in with_worker(db_url, engine, embedder="none"):
        yield c


async def _indexed(engine: AsyncEngine) -> None:
    """Wait until no job is queued or running."""
    await settle(None, engine)  # type: ignore[arg-type]  # settle does not use its client


async def _units(engine: AsyncEngine, *, compacted: bool | None = None) -> dict[str, Any]:
    """The stored units of session s's turns (or only its compacted or live ones), by
    message id (None: not stored)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT t.external_id, t.units, t.compacted FROM turns t JOIN sessions s"
                " ON s.id = t.session_id WHERE s.external_id = 's'"
            )
        )
        out = {r.external_id: r.units for r in rows if compacted in (None, r.compacted)}
    # Every record is stamped with the rules that read it.
    assert all(r["rules"] == RULES_STAMP for r in out.values() if r is not None)
    return {k: None if r is None else r["units"] for k, r in out.items()}


async def _store(
    engine: AsyncEngine, message_id: str, units: list[dict[str, Any]], *, rules: str = RULES_STAMP
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE turns SET units = CAST(:r AS jsonb) WHERE external_id = :id"),
            {"r": {"rules": rules, "units": units}, "id": message_id},
        )


async def _state_at(client: httpx.AsyncClient, left_out: str) -> list[str]:
    """The state's lines of a 700-token context, which leaves the turn ``left_out`` out."""
    ctx = (await client.get("/v1/sessions/s/context", params={"max_tokens": 700})).json()
    assert ctx["tokens"] <= 700
    assert left_out not in _live_contents(ctx)
    return _state_of(ctx).split("\n")


async def test_the_worker_stores_what_each_user_turn_states(
    indexed: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await _compacted_then(indexed, [*_later(RULE), _msg("u7", "user", PLAIN)])
    await _indexed(engine)
    units = await _units(engine)
    assert [(u["kind"], u["text"]) for u in units["u5"]] == [("constraint", RULE)]
    assert units["u7"] == []  # read, and states nothing
    assert units["a5"] is None and units["r0"] is None  # only user turns are read
    # The read renders the rule from the record, as before from the text.
    assert f"- {RULE}" in await _state_at(indexed, RULE)
    # A record that no longer loads (a unit's model changed since) is read again.
    await _store(engine, "u5", [{"kind": "constraint"}])
    assert f"- {RULE}" in await _state_at(indexed, RULE)
    # So is a record other rules wrote (an upgrade changed them), even one that says
    # the turn states nothing.
    await _store(engine, "u5", [], rules="older-rules")
    assert f"- {RULE}" in await _state_at(indexed, RULE)


async def test_the_read_goes_by_the_stored_units(
    indexed: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await _compacted_then(indexed, _later(PLAIN))
    await _indexed(engine)
    assert (await _units(engine))["u5"] == []
    # A record the rules would not make from this text now (an older version's, say)
    # is what the read adds: it does not read the turn again.
    stored = "Page the on-call engineer before any failover."
    assert turn_units(PLAIN) == ()
    record = dump_units([ConstraintUnit(text=stored, source_seqs=[0])])
    await _store(engine, "u5", record)
    assert f"- {stored}" in await _state_at(indexed, PLAIN)
    # And a turn recorded as stating nothing adds nothing, whatever its text says.
    await _store(engine, "u6", [])  # so that no other turn carries anything
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE turns SET content = :rule, units = CAST(:r AS jsonb)"
                " WHERE external_id = 'u5'"
            ),
            {"rule": RULE, "r": json.loads(record_of([]))},
        )
    assert not any(RULE in line for line in await _state_at(indexed, RULE))


async def _forget_units(engine: AsyncEngine) -> None:
    """No turn has a record: as turns stored before ingest read them."""
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE turns SET units = NULL"))


async def test_ingest_stores_what_each_user_turn_states(
    unindexed: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await _compacted_then(unindexed, _later(RULE))
    # A bulk post (its user texts over UNITS_POST_CHARS in all) is left to the worker.
    bulk = [
        _msg(f"b{i}", "user", f"{i}. We should look at the replica lag again.") for i in range(60)
    ]
    assert sum(len(m["content"]) for m in bulk) > UNITS_POST_CHARS
    assert (await post_turns(unindexed, "s", bulk)).status_code == 201
    # No turn is indexed (the index jobs wait an hour), yet each user turn is read.
    units = await _units(engine, compacted=False)
    assert [(u["kind"], u["text"]) for u in units["u5"]] == [("constraint", RULE)]
    assert units["u6"] == []  # read, and states nothing
    assert units["a5"] is None and units["r0"] is None  # only user turns are read
    # (Left to the worker's units job: tests/integration/test_read_units.py.)
    # The read knows a record of nothing by its text, as Postgres prints it.
    async with engine.connect() as conn:
        printed = await conn.scalar(text("SELECT units::text FROM turns WHERE external_id = 'u6'"))
    assert printed == record_of([])
    # The read goes by the record ingest stored: one the rules would not make from
    # this text is what it adds.
    stored = "Page the on-call engineer before any failover."
    await _store(engine, "u5", dump_units([ConstraintUnit(text=stored, source_seqs=[0])]))
    lines = await _state_at(unindexed, RULE)
    assert f"- {stored}" in lines and f"- {RULE}" not in lines


async def test_the_context_is_the_same_from_stored_units_as_from_the_text(
    unindexed: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    # A compressed session, and one never compressed (its notes are a state of their own).
    await _compacted_then(unindexed, [*_later(RULE), _msg("u7", "user", PLAIN)])
    never = [
        _msg("n1", "user", "We are moving the search cluster this week."),
        _msg("n2", "user", "Never reindex during business hours."),
        *[_msg(f"m{i}", "assistant", REPORT) for i in range(4)],
        _msg("n3", "user", "Thanks, what is next?"),
    ]
    assert (await post_turns(unindexed, "t", never)).status_code == 201

    async def contexts() -> list[dict[str, Any]]:
        return [
            (await unindexed.get(f"/v1/sessions/{s}/context", params={"max_tokens": n})).json()
            for s in ("s", "t")
            for n in (400, 700, 4000)
        ]

    assert (await _units(engine, compacted=False))["u5"] is not None
    stored = await contexts()
    assert any(f"- {RULE}" in _state_of(c) for c in stored)
    assert any("Never reindex during business hours." in _state_of(c) for c in stored[3:])
    await _forget_units(engine)
    assert await contexts() == stored


async def test_a_turn_without_a_record_is_read_from_its_text(
    unindexed: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await _compacted_then(unindexed, _later(RULE))
    await _forget_units(engine)
    assert (await _units(engine))["u5"] is None
    assert f"- {RULE}" in await _state_at(unindexed, RULE)


async def test_a_compression_stores_what_the_turns_it_leaves_live_state(
    no_memory: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    turns = [
        *OPENING,
        _msg("u5", "user", RULE),
        _msg("a5", "assistant", "OK."),
        _msg("u6", "user", PLAIN),
    ]
    assert (await post_turns(no_memory, "s", turns)).status_code == 201
    await _forget_units(engine)  # as turns ingested before ingest read them
    r = await no_memory.post("/v1/sessions/s/compact", params={"wait": "true"})
    assert r.json()["status"] == "compressed"
    live = await _units(engine, compacted=False)
    assert [(u["kind"], u["text"]) for u in live["u5"]] == [("constraint", RULE)]
    assert live["u6"] == [] and live["a5"] is None
    # What the compression took is in the state: nothing is stored for it.
    taken = await _units(engine, compacted=True)
    assert taken and all(u is None for u in taken.values())

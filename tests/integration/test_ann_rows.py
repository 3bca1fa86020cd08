"""The HNSW index holds only heavy users' rows (``memories.ann``, migration 0013).

A user with more than EXACT_SCAN_MAX live memories is searched through the index; every
other user exactly. So only a heavy user's vectors are worth the graph insert: a row is
written into the index when its user has rows there already, and a user's rows move
into it once, by the worker, when the user passes the limit. The heavy search ranks
the user's rows outside the index exactly beside the index scan: its answer never
depends on the move being done (before it, during it, rows written in a race with it).
EXACT_SCAN_MAX is made small here (30) so that a heavy user fits in a test.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.config import Settings
from app.memories.vectors import l2_normalize
from app.services.memory_jobs import move_heavy
from app.stores import memories as repo
from app.stores import sessions
from app.stores.engine import driver_connection
from app.stores.migrate import alembic_config
from tests.integration.test_index_batches import Recording, index_worker, talk
from tests.integration.test_memory_vectors import MODEL, add, exact, unit

HEAVY_AT = 30

ANN = text("SELECT id, ann FROM memories WHERE user_id = :u ORDER BY id")
HNSW_PAGES = text("SELECT pg_relation_size('memories_embedding_hnsw_idx') / 8192")


@pytest.fixture(autouse=True)
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repo, "EXACT_SCAN_MAX", HEAVY_AT)


def near(rng: random.Random, centre: list[float], spread: float = 0.2) -> list[float]:
    return l2_normalize([c * 4 + rng.gauss(0, spread / 8) for c in centre])


async def notes(
    conn: AsyncConnection, user_pk: int, rng: random.Random, count: int, at: list[float] | None
) -> list[int]:
    """``count`` memories of the user, with vectors around ``at`` (random if None)."""
    return [
        await add(conn, user_pk, f"{user_pk} note {rng.random()}", embedding=near(rng, at))
        if at is not None
        else await add(conn, user_pk, f"{user_pk} note {rng.random()}", embedding=unit(rng))
        for _ in range(count)
    ]


async def ann_of(engine: AsyncEngine, user_pk: int) -> dict[int, bool]:
    async with engine.connect() as conn:
        return {r.id: r.ann for r in await conn.execute(ANN, {"u": user_pk})}


async def assert_searches_exactly(
    engine: AsyncEngine, user_pk: int, queries: list[list[float]], *, through_hnsw: bool = True
) -> None:
    """Every query finds the exact ranking of the user's live memories (ids and order),
    on one pool connection (more runs than Postgres waits before a generic plan)."""
    async with engine.connect() as conn:
        for query in queries:
            for k in (5, 12):
                found = await repo.vector_search(
                    conn, user_pk=user_pk, query=query, model=MODEL, k=k
                )
                expected = await exact(conn, user_pk, query, k)
                assert [m.id for m in found] == [r["id"] for r in expected]
                assert [m.score for m in found] == pytest.approx([r["score"] for r in expected])
    if through_hnsw:
        async with engine.connect() as conn:
            live = (
                await conn.execute(
                    text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": user_pk}
                )
            ).scalar_one()
        assert live > HEAVY_AT  # the heavy path answered


async def test_a_heavy_users_search_is_exact_before_its_move_after_it_and_with_stragglers(
    engine: AsyncEngine,
) -> None:
    """Fails without the exact leg (the stragglers are missed), and when both legs read
    a row (an index leg not restricted to ``ann``: the row comes twice)."""
    rng = random.Random(21)
    centre = unit(rng)
    async with engine.begin() as conn:
        heavy = await sessions.ensure_user(conn, tenant="default", user="heavy")
        light = await sessions.ensure_user(conn, tenant="default", user="light")
        await notes(conn, heavy, rng, 45, None)
        await notes(conn, heavy, rng, 10, centre)
        await notes(conn, light, rng, 20, centre)
    queries = [near(rng, centre, 1.0) for _ in range(3)] + [unit(rng) for _ in range(2)]

    assert not any((await ann_of(engine, heavy)).values())  # before the move
    await assert_searches_exactly(engine, heavy, queries)

    moved = await move_heavy(engine, tenant="default", user_pks=[heavy, light])
    assert moved == 55
    assert all((await ann_of(engine, heavy)).values())
    assert not any((await ann_of(engine, light)).values())
    await assert_searches_exactly(engine, heavy, queries)

    # Rows written in a race with the move stay outside the index, nearest the queries.
    async with engine.begin() as conn:
        stragglers = await notes(conn, heavy, rng, 6, centre)
        await conn.execute(
            text("UPDATE memories SET ann = false WHERE id = ANY(:ids)"), {"ids": stragglers}
        )
    await assert_searches_exactly(engine, heavy, queries)
    async with engine.connect() as conn:
        found = await repo.vector_search(conn, user_pk=heavy, query=queries[0], model=MODEL, k=12)
    assert len(set(stragglers) & {m.id for m in found}) >= 3  # the premise: they rank


async def plan_of(conn: AsyncConnection, args: tuple[Any, ...], *, generic: bool) -> str:
    """The heavy search's plan, under its settings, for a generic or a custom plan (in
    ``conn``'s transaction, begun here)."""
    mode = "force_generic_plan" if generic else "force_custom_plan"
    await conn.execute(text(f"SET LOCAL plan_cache_mode = {mode}"))
    # At test size a scan of the user's rows and a sort cost less than any index scan;
    # without them, a leg either has an index path or is left with a disabled plan.
    await conn.execute(text("SET LOCAL enable_bitmapscan = off"))
    await conn.execute(text("SET LOCAL enable_sort = off"))
    db = await driver_connection(conn)
    await db.execute(repo.HNSW_SETTINGS, str(repo.HNSW_EF_SEARCH), str(repo.HNSW_MAX_SCAN_TUPLES))
    if not args:
        return ""
    return "\n".join(r[0] for r in await db.fetch("EXPLAIN " + repo.VECTOR_HNSW, *args))


async def test_the_heavy_search_reads_the_partial_index_and_the_rows_outside_it_by_user(
    engine: AsyncEngine,
) -> None:
    """Fails when the index leg does not say ``m.ann`` (the planner cannot prove the
    partial index covers it), and when the exact leg has no index on ``ann``."""
    rng = random.Random(22)
    async with engine.begin() as conn:
        users = [
            await sessions.ensure_user(conn, tenant="default", user=f"u{i}") for i in range(12)
        ]
        for user_pk in users:
            await notes(conn, user_pk, rng, 40 if user_pk in users[:4] else 20, None)
    await move_heavy(engine, tenant="default", user_pks=users)
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE memories"))
    for generic in (False, True):
        async with engine.begin() as conn:
            plan = await plan_of(conn, (users[0], unit(rng), MODEL, None, 10), generic=generic)
        index_leg, exact_leg = plan.split("Subquery Scan on")[1:3]
        assert "Index Scan using memories_embedding_hnsw_idx" in index_leg, plan
        assert "memories_user_ann_idx" in exact_leg, plan
        assert "Seq Scan" not in plan, plan


async def test_the_index_leg_is_not_run_for_a_user_with_no_row_in_the_index(
    engine: AsyncEngine,
) -> None:
    """Before a heavy user's move, the index leg is skipped, not run to the end of its
    scan budget over other users' rows. Fails without the leg's one-time test."""
    rng = random.Random(26)
    async with engine.begin() as conn:
        moved, waiting = [
            await sessions.ensure_user(conn, tenant="default", user=u) for u in ("in", "out")
        ]
        await notes(conn, moved, rng, 40, None)
        await repo.flip_heavy(conn, tenant="default", user_pks=[moved])
        await notes(conn, waiting, rng, 40, None)
    async with engine.begin() as conn:
        await plan_of(conn, (), generic=False)  # the settings
        db = await driver_connection(conn)
        plan = "\n".join(
            r[0]
            for r in await db.fetch(
                "EXPLAIN (ANALYZE, COSTS OFF) " + repo.VECTOR_HNSW,
                waiting,
                unit(rng),
                MODEL,
                None,
                5,
            )
        )
    index_scan = next(line for line in plan.splitlines() if "memories_embedding_hnsw_idx" in line)
    assert "never executed" in index_scan, plan


async def test_an_index_leg_short_of_k_is_topped_up_when_rows_outside_fill_the_count(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index leg stops short (a scan budget of one tuple, spent on other users' rows
    around the query) while more than k of the user's rows lie outside the index: the
    search answers exactly all the same. Fails when only the rows' total is checked."""
    monkeypatch.setattr(repo, "HNSW_EF_SEARCH", 1)
    monkeypatch.setattr(repo, "HNSW_MAX_SCAN_TUPLES", 1)
    rng = random.Random(27)
    centre = unit(rng)
    async with engine.begin() as conn:
        heavy, *others = [
            await sessions.ensure_user(conn, tenant="default", user=f"s{i}") for i in range(4)
        ]
        await notes(conn, heavy, rng, 40, None)
        for other in others:
            await notes(conn, other, rng, 40, centre)
    await move_heavy(engine, tenant="default", user_pks=[heavy, *others])
    async with engine.begin() as conn:
        stragglers = await notes(conn, heavy, rng, 12, None)
        await conn.execute(
            text("UPDATE memories SET ann = false WHERE id = ANY(:ids)"), {"ids": stragglers}
        )
        await conn.execute(text("ANALYZE memories"))
    query = near(rng, centre, 1.0)
    async with engine.begin() as conn:
        await plan_of(conn, (), generic=False)  # the index leg through the index
        db = await driver_connection(conn)
        legs = await db.fetch(repo.VECTOR_HNSW, heavy, query, MODEL, None, 10)
        found = await repo.vector_search(conn, user_pk=heavy, query=query, model=MODEL, k=10)
        expected = await exact(conn, heavy, query, 10)
    assert sum(r["in_index"] for r in legs) < 10 <= len(legs)  # the premise
    assert [m.id for m in found] == [r["id"] for r in expected]


async def test_a_light_users_vectors_never_reach_the_hnsw_index(engine: AsyncEngine) -> None:
    """Index pages before and after writing ordinary users' vectors (as added, embedded
    later, and indexed by the worker's statement): none added; a heavy user's move adds
    them. Fails with the full index (migration 0012) or writes that mark every row."""
    rng = random.Random(23)
    async with engine.connect() as conn:
        empty = (await conn.execute(HNSW_PAGES)).scalar_one()
    async with engine.begin() as conn:
        light = await sessions.ensure_user(conn, tenant="default", user="light")
        await notes(conn, light, rng, 25, None)
        later = [await add(conn, light, f"curated {i}") for i in range(5)]
        await repo.set_embeddings(
            conn, tenant="default", embeddings=[(i, unit(rng)) for i in later], model=MODEL
        )
        await repo.flip_heavy(conn, tenant="default", user_pks=[light])
    async with engine.connect() as conn:
        assert (await conn.execute(HNSW_PAGES)).scalar_one() == empty
    assert not any((await ann_of(engine, light)).values())
    async with engine.begin() as conn:
        await notes(conn, light, rng, 5, None)  # 35 now: heavy
        await repo.flip_heavy(conn, tenant="default", user_pks=[light])
        assert (await conn.execute(HNSW_PAGES)).scalar_one() > empty
    assert all((await ann_of(engine, light)).values())


async def test_the_worker_moves_a_user_who_passes_the_limit_once(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions indexed one after another: nothing moves while the user is ordinary; the
    job that takes the user past the limit moves every row of the user; the next jobs
    write theirs into the index and move none. Fails when the writes of a heavy user do
    not mark their rows, or when a move takes rows already in the index."""
    moves: list[int] = []
    flip = repo.flip_heavy

    async def recorded(conn: AsyncConnection, **kw: Any) -> int:
        moves.append(await flip(conn, **kw))
        return moves[-1]

    monkeypatch.setattr(repo, "flip_heavy", recorded)
    worker = index_worker(engine, settings, Recording())
    counts = []
    for i in range(5):
        await talk(engine, f"s{i}", user="talker", n=4)
        assert await worker.run_once() is not None
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    text("SELECT count(*) FILTER (WHERE ann), count(*) FROM memories")
                )
            ).one()
        counts.append((rows[0], rows[1]))
    heavy_from = next(i for i, (_, total) in enumerate(counts) if total > HEAVY_AT)
    assert 0 < heavy_from < len(counts) - 1  # the premise: ordinary first, then heavy
    assert all(ann == 0 for ann, _ in counts[:heavy_from])
    assert all(ann == total for ann, total in counts[heavy_from:])
    assert moves == [0] * heavy_from + [counts[heavy_from][1]] + [0] * (
        len(counts) - heavy_from - 1
    )


async def test_writes_during_a_move_lose_nothing(engine: AsyncEngine) -> None:
    """While a move is uncommitted: new rows commit outside the index (they cannot see
    it) and are found all the same, then moved by the next move; a vector written to a
    row the move holds waits for it and lands in the index. Fails without the exact leg,
    or when a vector's write marks its row by the user alone (it read the user before
    the move committed)."""
    rng = random.Random(24)
    centre = unit(rng)
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="racer")
        await notes(conn, user_pk, rng, 40, None)
        pending = await add(conn, user_pk, "embedded during the move")
    async with engine.connect() as mover:
        await mover.begin()
        assert await repo.flip_heavy(mover, tenant="default", user_pks=[user_pk]) == 41
        async with engine.begin() as conn:
            racing = await notes(conn, user_pk, rng, 4, centre)
        async with engine.connect() as conn:
            await conn.begin()
            embedding = asyncio.create_task(
                repo.set_embedding(
                    conn, memory_id=pending, embedding=near(rng, centre), model=MODEL
                )
            )
            await asyncio.sleep(0.3)
            assert not embedding.done()  # it waits for the move's lock on the row
            await mover.commit()
            await embedding
            await conn.commit()
    flags = await ann_of(engine, user_pk)
    assert [flags[i] for i in racing] == [False] * 4
    assert flags[pending] is True
    queries = [near(rng, centre, 1.0) for _ in range(3)]
    await assert_searches_exactly(engine, user_pk, queries)
    async with engine.connect() as conn:
        found = await repo.vector_search(conn, user_pk=user_pk, query=queries[0], model=MODEL, k=8)
    assert {*racing, pending} <= {m.id for m in found}
    async with engine.begin() as conn:
        assert await repo.flip_heavy(conn, tenant="default", user_pks=[user_pk]) == 4
    assert all((await ann_of(engine, user_pk)).values())
    await assert_searches_exactly(engine, user_pk, queries)


async def migrate(engine: AsyncEngine, to: str) -> None:
    """The database of ``engine`` migrated down to revision ``to``, or up to head."""
    cfg = alembic_config()

    def run(sync_conn: Any) -> None:
        cfg.attributes["connection"] = sync_conn
        (command.upgrade if to == "head" else command.downgrade)(cfg, to)

    async with engine.begin() as conn:
        await conn.run_sync(run)
    await engine.dispose()  # a connection opened before a type changed keeps its codecs


async def test_the_migration_marks_the_heavy_users_rows_and_the_downgrade_indexes_all(
    engine: AsyncEngine,
) -> None:
    """From 0012 with data: a user past 5,000 live memories (the limit of the revision)
    has every row marked and searched through the partial index; another has none; the
    downgrade gives the full index back."""
    rng = random.Random(25)

    async def index_definition() -> str:
        async with engine.connect() as conn:
            return str(
                (
                    await conn.execute(
                        text(
                            "SELECT indexdef FROM pg_indexes"
                            " WHERE indexname = 'memories_embedding_hnsw_idx'"
                        )
                    )
                ).scalar_one()
            )

    await migrate(engine, "0012")
    assert "WHERE" not in await index_definition()
    async with engine.begin() as conn:
        heavy = await sessions.ensure_user(conn, tenant="default", user="big")
        light = await sessions.ensure_user(conn, tenant="default", user="small")
        # Past the limit without 5,000 graph inserts: most of the rows have no vector yet.
        await conn.execute(
            text(
                "INSERT INTO memories (tenant_id, user_id, kind, text, text_key)"
                " SELECT 'default', :u, 'fact', 'n' || g, 'n' || g FROM generate_series(1, 5000) g"
            ),
            {"u": heavy},
        )
        written = {u: [unit(rng) for _ in range(5)] for u in (heavy, light)}
        vectors = {
            u: [
                (
                    await conn.execute(
                        text(
                            "INSERT INTO memories (tenant_id, user_id, kind, text, text_key,"
                            " embedding, embedding_model, embedding_dim)"
                            " VALUES ('default', :u, 'fact', :t, :t, :e, :model, :dim)"
                            " RETURNING id"
                        ),
                        {"u": u, "t": f"v{i}", "e": e, "model": MODEL, "dim": len(e)},
                    )
                ).scalar_one()
                for i, e in enumerate(written[u])
            ]
            for u in (heavy, light)
        }
    await migrate(engine, "head")
    assert (await index_definition()).endswith("WHERE ann")
    assert set((await ann_of(engine, heavy)).values()) == {True}
    assert set((await ann_of(engine, light)).values()) == {False}
    async with engine.begin() as conn:
        query = written[heavy][2]
        found = await repo.vector_search(conn, user_pk=heavy, query=query, model=MODEL, k=3)
        plan = await plan_of(conn, (heavy, query, MODEL, None, 3), generic=False)
    assert found[0].id == vectors[heavy][2]
    assert {m.id for m in found} <= set(vectors[heavy])
    assert "memories_embedding_hnsw_idx" in plan
    await migrate(engine, "0012")
    assert "WHERE" not in await index_definition()
    async with engine.connect() as conn:
        ann = text("SELECT attname FROM pg_attribute WHERE attrelid = 'memories'::regclass")
        assert "ann" not in set((await conn.execute(ann)).scalars())

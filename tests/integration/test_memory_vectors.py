"""The half-precision copies of the memory vectors (``memory_vectors``, migration 0009).

The exact per-user search ranks a user's vectors from these narrow rows and re-ranks
the best by the full vectors: it must find what ranking the memories themselves finds,
so every vector written has its copy, written by the same statement, and goes with it.
"""

from __future__ import annotations

import random
from typing import Any

import asyncpg
import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.memories.bm25 import index_terms, search_terms
from app.memories.vectors import l2_normalize
from app.stores import memories as repo
from app.stores import sessions
from app.stores.engine import driver_connection
from app.stores.migrate import alembic_config
from app.stores.tables import EMBEDDING_DIM

MODEL = "hash-ngram-v1"

# Each copy beside its memory: how the copy differs from the full vector (0: equal
# at half precision), and what it carries.
COPIES = text("""
    SELECT m.id, v.memory_id IS NOT NULL AS copied, v.user_id = m.user_id AS same_user,
           v.kind = m.kind AS same_kind,
           CAST(v.embedding AS vector) <-> CAST(CAST(m.embedding AS halfvec) AS vector) AS gap
    FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id
    WHERE m.embedding IS NOT NULL
    ORDER BY m.id
""")


def unit(rng: random.Random) -> list[float]:
    return l2_normalize([rng.gauss(0, 1) for _ in range(EMBEDDING_DIM)])


async def add(
    conn: AsyncConnection,
    user_pk: int,
    body: str,
    *,
    kind: str = "fact",
    embedding: list[float] | None = None,
) -> int:
    return await repo.insert_memory(
        conn,
        tenant="default",
        user_pk=user_pk,
        kind=kind,
        text_=body,
        text_key=body,
        pinned=False,
        ttl_days=None,
        source={},
        metadata={},
        terms=index_terms(body),
        embedding=embedding,
        model=None if embedding is None else MODEL,
    )


async def copies(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as conn:
        return list(await conn.execute(COPIES))


async def exact(conn: AsyncConnection, user_pk: int, query: list[float], k: int) -> list[Any]:
    db = await driver_connection(conn)
    return list(await db.fetch(repo.VECTOR_EXACT, user_pk, query, MODEL, None, k))


async def test_every_written_vector_has_its_copy_and_it_goes_with_its_memory(
    engine: AsyncEngine,
) -> None:
    rng = random.Random(3)
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="v")
        indexed = await add(conn, user_pk, "an indexed turn", kind="episode", embedding=unit(rng))
        curated = await add(conn, user_pk, "a curated fact")  # embedded later, by its job
        gone = await add(conn, user_pk, "deleted soon", embedding=unit(rng))
    async with engine.begin() as conn:
        assert [r.id for r in await conn.execute(COPIES)] == [indexed, gone]
        await repo.set_embedding(conn, memory_id=curated, embedding=unit(rng), model=MODEL)
        await repo.set_embedding(conn, memory_id=indexed, embedding=unit(rng), model=MODEL)
        assert await repo.delete_memory(conn, user_pk=user_pk, memory_id=gone)
    found = await copies(engine)
    assert [r.id for r in found] == [indexed, curated]
    # The copy is the vector rewritten last, at half precision, of the memory's user and kind.
    assert all(r.copied and r.same_user and r.same_kind and r.gap == 0 for r in found)
    async with engine.begin() as conn:
        await repo.forget_embeddings(conn, model="another-model")
        left = (await conn.execute(text("SELECT count(*) FROM memory_vectors"))).scalar_one()
    assert left == 0


async def test_the_search_ranks_as_the_full_vectors_do(engine: AsyncEngine) -> None:
    """Same memories, same order as the exact ranking over the memories' own vectors,
    superseded and expired memories left out, for several queries and k."""
    rng = random.Random(5)
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="r")
        other = await sessions.ensure_user(conn, tenant="default", user="o")
        ids = [await add(conn, user_pk, f"m{i}", embedding=unit(rng)) for i in range(120)]
        for i in range(40):
            await add(conn, other, f"o{i}", embedding=unit(rng))
        for old, new in zip(ids[:10], ids[10:20], strict=True):
            await repo.supersede(conn, old_id=old, new_id=new, user_pk=user_pk)
        await conn.execute(
            text("UPDATE memories SET expires_at = now() - interval '1 day' WHERE id = ANY(:ids)"),
            {"ids": ids[20:30]},
        )
    async with engine.connect() as conn:
        for k in (1, 5, 20, 60):
            query = unit(rng)
            found = await repo.vector_search(conn, user_pk=user_pk, query=query, model=MODEL, k=k)
            expected = await exact(conn, user_pk, query, k)
            assert [m.id for m in found] == [r["id"] for r in expected]
            assert [m.score for m in found] == pytest.approx([r["score"] for r in expected])
            assert not {m.id for m in found} & set(ids[:10] + ids[20:30])


async def test_a_search_whose_nearest_copies_are_not_live_is_answered_in_full(
    engine: AsyncEngine,
) -> None:
    """More superseded memories near the query than the copies' slack: the search still
    returns k live memories (the exact ranking over the memories), never fewer."""
    rng = random.Random(9)
    axis = [1.0] + [0.0] * (EMBEDDING_DIM - 1)

    def near(spread: float) -> list[float]:
        return l2_normalize([a * 8 + rng.gauss(0, spread) for a in axis])

    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="s")
        live = [await add(conn, user_pk, f"far{i}", embedding=unit(rng)) for i in range(30)]
        stale = [
            await add(conn, user_pk, f"near{i}", embedding=near(0.3))
            for i in range(repo.NEAR_SLACK + 10)
        ]
        for old in stale:
            await repo.supersede(conn, old_id=old, new_id=live[0], user_pk=user_pk)
    async with engine.connect() as conn:
        query = near(0.3)
        found = await repo.vector_search(conn, user_pk=user_pk, query=query, model=MODEL, k=5)
        expected = await exact(conn, user_pk, query, 5)
    assert len(found) == 5
    assert [m.id for m in found] == [r["id"] for r in expected]
    assert set(m.id for m in found) <= set(live)


async def test_the_migration_copies_existing_vectors_and_drops_the_unread_terms(
    db_url: str, engine: AsyncEngine
) -> None:
    """From 0008 with data: the upgrade copies every stored vector; the downgrade gives
    ``memories.terms`` back, rebuilt from the postings."""
    rng = random.Random(13)
    cfg = alembic_config()

    def migrate(to: str) -> Any:
        def run(sync_conn: Any) -> None:
            cfg.attributes["connection"] = sync_conn
            (command.downgrade if to == "0008" else command.upgrade)(cfg, to)

        return run

    async with engine.begin() as conn:
        await conn.run_sync(migrate("0008"))
    await engine.dispose()
    vectors = [unit(rng) for _ in range(3)]
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user="m")
        for i, vector in enumerate([*vectors, None]):
            body = f"the red kite {i} red"
            mid = (
                await conn.execute(
                    text(
                        "INSERT INTO memories (tenant_id, user_id, kind, text, text_key, terms,"
                        " embedding, embedding_model, embedding_dim)"
                        " VALUES ('default', :u, 'fact', :t, :t, :terms, :e, :model, :dim)"
                        " RETURNING id"
                    ),
                    {
                        "u": user_pk,
                        "t": body,
                        "terms": index_terms(body),
                        "e": vector,
                        "model": MODEL if vector else None,
                        "dim": EMBEDDING_DIM if vector else None,
                    },
                )
            ).scalar_one()
            await conn.execute(
                text(
                    repo.POSTINGS.replace(
                        "FROM m,",
                        "FROM (SELECT CAST(:mid AS bigint) AS id, CAST(:u AS bigint) AS user_id,"
                        " 'fact' AS kind) m,",
                    )
                ),
                {"mid": mid, "u": user_pk, **repo.postings(index_terms(body))},
            )
    async with engine.begin() as conn:
        await conn.run_sync(migrate("head"))
    await engine.dispose()
    found = await copies(engine)
    assert len(found) == 3
    assert all(r.copied and r.same_user and r.same_kind and r.gap == 0 for r in found)
    async with engine.connect() as conn:
        columns = (
            await conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_name = 'memories'"
                )
            )
        ).scalars()
        assert "terms" not in set(columns)
        found_ids = [
            m.id
            for m in await repo.vector_search(
                conn, user_pk=user_pk, query=vectors[1], model=MODEL, k=3
            )
        ]
        assert found_ids[0] == found[1].id
    async with engine.begin() as conn:
        await conn.run_sync(migrate("0008"))
    await engine.dispose()
    async with engine.connect() as conn:
        terms = (await conn.execute(text("SELECT terms FROM memories ORDER BY id"))).scalars()
        assert [sorted(t) for t in terms] == [
            sorted(index_terms(f"the red kite {i} red")) for i in range(4)
        ]


WORDS = "harbour lantern orchard copper meadow violin glacier pepper canyon".split()


def literal(value: Any) -> str:
    """A parameter as SQL text, for EXECUTE of a statement prepared by the driver."""
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list) and value and isinstance(value[0], float):
        return "'[" + ",".join(repr(x) for x in value) + "]'"
    if isinstance(value, list):  # text[] of search terms (words: no quoting needed)
        return "'{" + ",".join(value) + "}'"
    return "'" + str(value) + "'"


async def add_notes(engine: AsyncEngine, user: str, count: int, rng: random.Random) -> int:
    """``count`` memories of ``user`` (two random words and a number, and a vector)."""
    async with engine.begin() as conn:
        user_pk = await sessions.ensure_user(conn, tenant="default", user=user)
        for i in range(count):
            words = f"{rng.choice(WORDS)} {rng.choice(WORDS)} note {i}"
            await add(conn, user_pk, words, embedding=unit(rng))
    return user_pk


async def buffers(db: asyncpg.Connection, marker: str, *args: Any) -> tuple[int, int]:
    """(shared buffers read, generic plans so far) of the statement the driver prepared
    for the SQL containing ``marker``, executed with ``args`` as that connection would."""
    [prepared] = [
        r
        for r in await db.fetch("SELECT name, statement, generic_plans FROM pg_prepared_statements")
        if marker in r["statement"] and not r["statement"].startswith("SELECT name")
    ]
    plan = await db.fetch(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {prepared['name']}"
        f"({', '.join(literal(a) for a in args)})"
    )
    [tree] = plan[0][0]  # the engine's JSON codec has decoded it
    return int(tree["Plan"]["Shared Hit Blocks"]) + int(tree["Plan"]["Shared Read Blocks"]), int(
        prepared["generic_plans"]
    )


async def test_a_search_reads_its_user_not_the_table_after_the_table_grew(
    engine: AsyncEngine,
) -> None:
    """asyncpg prepares each statement once per pool connection. Postgres would switch a
    prepared statement to a generic plan after five runs, costed for the table sizes of
    that moment, and keep it while the tables grow: on a fresh database (a warm-up user,
    a handful of rows) the join to the memories became a scan of every live memory per
    candidate (7-17 ms instead of 0.4, on one pool connection of two). The statement
    keeps custom plans and fetches its candidates by primary key."""
    rng = random.Random(11)

    user_pk = await add_notes(engine, "small", 4, rng)
    query = unit(rng)
    terms = search_terms(" ".join(WORDS))
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        # More runs than Postgres waits before it considers a generic plan.
        for _ in range(8):
            await repo.vector_search(conn, user_pk=user_pk, query=query, model=MODEL, k=10)
            await repo.lexical_search(conn, user_pk=user_pk, terms=terms, k=20)
        await add_notes(engine, "large", 600, rng)  # other users' memories arrive
        found = await repo.vector_search(conn, user_pk=user_pk, query=query, model=MODEL, k=10)
        assert len(found) == 4
        vector, vector_generic = await buffers(
            db, "near AS MATERIALIZED", user_pk, query, MODEL, None, 10, repo.EXACT_SCAN_MAX
        )
        lexical, _ = await buffers(db, "avgdl AS MATERIALIZED", user_pk, terms, None, 20)
    assert vector_generic == 0  # planned for each execution's values
    # A few pages per memory of the user and per index level, never the 600 others.
    assert lexical < 100, lexical  # its postings read thrice (LEXICAL), still a few pages
    assert vector < 60, vector

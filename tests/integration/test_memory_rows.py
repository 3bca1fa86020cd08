"""The searches on the /context path build their memories by column position, not by
name (a hundred rows a read): each must give every field of the memory as the row
read by name does, whichever statement (and whichever leading columns) it came from."""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.memories.bm25 import index_terms
from app.stores import memories as repo
from app.stores import sessions
from app.stores.engine import driver_connection
from tests.integration.test_memory_vectors import MODEL, unit

BY_NAME = text(f"SELECT {repo.MEMORY_COLUMNS} FROM memories m WHERE m.id = ANY(:ids)")


async def _user_and_session(conn: AsyncConnection, *, session: str, user: str) -> tuple[int, int]:
    await sessions.create_session(conn, tenant="default", session=session, user=user)
    user_pk = await sessions.ensure_user(conn, tenant="default", user=user)
    found = await conn.execute(
        text("SELECT id FROM sessions WHERE external_id = :s"), {"s": session}
    )
    return user_pk, int(found.scalar_one())


async def _turn(
    conn: AsyncConnection,
    *,
    user_pk: int,
    session_pk: int,
    session: str,
    seq: int,
    body: str,
    source: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    **vector: Any,
) -> None:
    """One turn memory (a turn row of ``session``, as the worker indexes it)."""
    await repo.insert_memory(
        conn,
        tenant="default",
        user_pk=user_pk,
        kind="episode",
        text_=body,
        text_key=body,
        pinned=False,
        ttl_days=30,
        source={"session_id": session, "seqs": [seq], **(source or {})},
        metadata={"granularity": "turn", **(metadata or {})},
        terms=index_terms(body),
        session_pk=session_pk,
        turn_seq=seq,
        **vector,
    )


async def _memories(engine: AsyncEngine) -> tuple[int, int, list[float]]:
    """A user with turn memories of one session (with sources, metadata, expiry and
    vectors) and a pinned high-stakes fact; returns (user pk, session pk, a query)."""
    rng = random.Random(11)
    async with engine.begin() as conn:
        user_pk, session_pk = await _user_and_session(conn, session="s-rows", user="u-rows")
        query = unit(rng)
        for seq in range(1, 9):
            await _turn(
                conn,
                user_pk=user_pk,
                session_pk=session_pk,
                session="s-rows",
                seq=seq,
                body=f"Turn {seq}: the harbour ferry leaves at {seq} pm",
                source={"from": "2024-05-07T10:00:00"},
                metadata={"tokens": 12 + seq},
                embedding=unit(rng),
                model=MODEL,
            )
        await repo.insert_memory(
            conn,
            tenant="default",
            user_pk=user_pk,
            kind="high_stakes",
            text_="Allergic to peanuts",
            text_key="peanuts",
            pinned=True,
            ttl_days=None,
            source={"via": "api"},
            metadata={"note": "pinned"},
            terms=index_terms("Allergic to peanuts"),
            embedding=query,
            model=MODEL,
        )
    return user_pk, session_pk, query


async def test_every_search_statement_builds_the_memory_read_by_name(
    engine: AsyncEngine,
) -> None:
    user_pk, session_pk, query = await _memories(engine)
    async with engine.connect() as conn:
        db = await driver_connection(conn)
        lexical = await repo.lexical_search(db, user_pk=user_pk, terms=["ferry"], k=5)
        vector = await repo.vector_search(db, user_pk=user_pk, query=query, model=MODEL, k=5)
        exact = repo.Ranking(
            await db.fetch(repo.VECTOR_EXACT, user_pk, query, MODEL, None, 5)
        ).rows()
        turns, pinned = await repo.turns_and_pinned(
            db, user_pk=user_pk, pairs=[(session_pk, 2), (session_pk, 5)]
        )
        found = [*lexical, *vector, *exact, *turns, *pinned]
        by_name = {
            r.id: repo._row(r._mapping)
            for r in await conn.execute(BY_NAME, {"ids": [m.id for m in found]})
        }
    assert len(lexical) == 5 and len(vector) == 5 and len(exact) == 5
    assert [m.text for m in pinned] == ["Allergic to peanuts"]
    assert sorted(m.source["seqs"][0] for m in turns) == [2, 5]
    for m in found:
        assert m.score is None or isinstance(m.score, float)
        assert m.scored(None) == by_name[m.id], m.id
    # The vector search's scores are the cosine similarities, best first.
    assert vector[0].text == "Allergic to peanuts" and vector[0].score == 1.0
    assert [m.score for m in vector] == [m.score for m in exact]
    assert all(m.score is not None and 0 < m.score <= 10 for m in lexical)


async def test_the_turns_come_in_the_order_of_the_pairs_asked_for(
    engine: AsyncEngine,
) -> None:
    """The memory block breaks ties in value by the order of the rows read: the turns
    come back in the order of ``pairs`` (pairs without a row left out), whatever join
    Postgres picks (a hash join returns them in the table's order)."""
    async with engine.begin() as conn:
        user_pk, session_pk = await _user_and_session(conn, session="s-order", user="u-order")
        for seq in range(1, 61):
            await _turn(
                conn,
                user_pk=user_pk,
                session_pk=session_pk,
                session="s-order",
                seq=seq,
                body=f"Turn {seq}: the same few words",
            )
        await conn.execute(text("ANALYZE memories"))
    # Fewer pairs than rows: a hash join then hashes the pairs and reads the user's
    # memories in their index's order.
    seqs = random.Random(5).sample(range(1, 71), 20)  # 61-70 have no row
    # The planner's choice (a hash join of the pairs, with these statistics), then one
    # without nested loops or merge joins.
    for nested_loops in ("on", "off"):
        async with engine.connect() as conn:
            db = await driver_connection(conn)
            await db.execute(f"SET enable_nestloop = {nested_loops}")
            await db.execute(f"SET enable_mergejoin = {nested_loops}")
            try:
                turns, pinned = await repo.turns_and_pinned(
                    db, user_pk=user_pk, pairs=[(session_pk, s) for s in seqs]
                )
            finally:
                await db.execute("RESET enable_nestloop; RESET enable_mergejoin")
        assert pinned == []
        assert [m.source["seqs"][0] for m in turns] == [s for s in seqs if s <= 60], nested_loops

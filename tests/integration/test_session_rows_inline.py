"""A session's ids stay in its row once its user turn's vector is stored (migration 0014).

``sessions.last_user_embedding`` is stored inline (2 KB at 512 dimensions), which puts an
indexed session's row past Postgres's TOAST threshold; without 0014's
``toast_tuple_target`` Postgres moved a session id of UUID length out of the row, and every
statement reading it paid a TOAST probe.
"""

from __future__ import annotations

import random
import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.memories.vectors import l2_normalize
from app.stores import sessions
from app.stores.tables import EMBEDDING_DIM

# Each session's values stored out of its row (a TOAST chunk id: not NULL).
OUT_OF_LINE = text("""
    SELECT external_id, pg_column_toast_chunk_id(external_id) IS NOT NULL AS id_out,
           pg_column_toast_chunk_id(tenant_id) IS NOT NULL AS tenant_out,
           pg_column_toast_chunk_id(agent) IS NOT NULL AS agent_out
    FROM sessions WHERE external_id = ANY(:ids) ORDER BY external_id
""")


async def test_an_indexed_session_keeps_its_ids_in_its_row(engine: AsyncEngine) -> None:
    rng = random.Random(14)
    ids = sorted(str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3))
    async with engine.begin() as conn:
        for session in ids:
            await sessions.create_session(conn, tenant="default", session=session, user="inline")
            await conn.execute(
                text("UPDATE sessions SET agent = :agent WHERE external_id = :session"),
                {"agent": "agent-" + "x" * 30, "session": session},
            )
            pk = (
                await conn.execute(
                    text("SELECT id FROM sessions WHERE external_id = :s"), {"s": session}
                )
            ).scalar_one()
            await sessions.set_index_marks(
                conn,
                tenant="default",
                session_pk=pk,
                episode_seq=0,
                last_user_seq=1,
                last_user_embedding=l2_normalize([rng.gauss(0, 1) for _ in range(EMBEDDING_DIM)]),
            )
    async with engine.connect() as conn:
        rows = list(await conn.execute(OUT_OF_LINE, {"ids": ids}))
    assert [r.external_id for r in rows] == ids
    # Before 0014 the UUID and the agent's name were moved out of every such row.
    assert not any(r.id_out or r.tenant_out or r.agent_out for r in rows)

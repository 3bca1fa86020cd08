"""A miss signalled by the agent: restore what compression took away, keep a sample.

``POST /v1/sessions/{id}/misses`` names what was needed. Under the session's lock
(the one compressions take), the compacted turns that hold it come back into the
state as pinned facts naming their turn (``app.compression.restore``), the state's
version moves, and the sample (the compacted turns, the state before, what was
needed) is stored for `mnemo misses export`. Detected misses (the agent asking the
user again) are handled by the compression itself (``services.compression``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.restore import Fragment, relevant, restore, sample_turns
from app.core.config import Settings
from app.core.tokens import count_tokens
from app.memories.bm25 import index_terms
from app.services import tasks as task_service
from app.services.compression import render_state
from app.stores import compression as state_store
from app.stores import misses as store


@dataclass(frozen=True)
class Miss:
    id: int
    detection: str
    needed: str
    restored: list[Fragment]
    state_version: int


async def signal(
    conn: AsyncConnection, *, tenant: str, session: str, needed: str, settings: Settings
) -> Miss:
    """In the caller's transaction: restore and record one explicit miss."""
    locked = await store.lock_session(conn, tenant=tenant, session=session)
    archived = await store.compacted_turns(conn, session_pk=locked.pk)
    fragments = relevant(needed, archived, index_terms)
    version = locked.version
    have = {h.key for h in locked.state.high_stakes}
    if any(f"restored:{f.seq}" not in have for f in fragments):
        shared = await task_service.private_sections(conn, session_pk=locked.pk)
        language = locked.state.language
        state = restore(locked.state, fragments, language)
        tiers = render_state(state, settings=settings, shared=shared, language=language)
        state.renderings = tiers[1:]
        rendered = tiers[0] if tiers else ""
        version += 1
        await state_store.write_restored_state(
            conn,
            session_pk=locked.pk,
            version=version,
            state=state,
            rendered=rendered,
            rendered_tokens=count_tokens(rendered),
        )
    seqs = [f.seq for f in fragments]
    miss_id = await store.insert_miss(
        conn,
        tenant=tenant,
        session_pk=locked.pk,
        detection="explicit",
        needed=needed,
        restored_seqs=seqs,
        state=locked.state,
        turns=sample_turns(archived, seqs),
    )
    return Miss(
        id=miss_id,
        detection="explicit",
        needed=needed,
        restored=fragments,
        state_version=version,
    )

"""The long-term memory block of a context: gate, query, hybrid retrieval, budget.

Called on the /context path, so it is careful with cost: nothing at all when the
user has no memories or the latest turn is an acknowledgement; the query vector
is the worker's embedding of the latest user turn when it is current, and only
an explicit ``query`` is embedded here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from app.compression.render import detect_language
from app.core.tokens import count_tokens
from app.memories import repo
from app.memories.embed import Embedder
from app.memories.fuse import pack_memories
from app.memories.gate import build_query, needs_retrieval
from app.memories.repo import MemoryRow
from app.memories.service import age_label, hybrid_search

LAST_USER_EMBEDDING = "SELECT last_user_embedding FROM sessions WHERE id = $1"

PER_SESSION = 2
HEADERS = {"en": "## Long-term memory", "zh": "## 长期记忆"}
PINNED = {"en": "pinned", "zh": "置顶"}


@dataclasses.dataclass(frozen=True)
class MemoryRequest:
    session_pk: int
    user_pk: int
    explicit_query: str | None
    latest_user: tuple[int, str] | None  # (seq, text) of the newest user turn in view
    recent_user_texts: list[str]  # oldest first
    last_embedded_seq: int | None
    budget_tokens: int
    top_k: int


async def memory_block(
    conn: AsyncConnection,
    db: asyncpg.Connection,
    request: MemoryRequest,
    *,
    embedder: Embedder | None,
) -> tuple[str, list[MemoryRow]]:
    """The rendered block and the memories in it ('' and [] when there is nothing)."""
    pinned = await repo.pinned_high_stakes(conn, user_pk=request.user_pk)
    found: list[MemoryRow] = []
    query = request.explicit_query or (request.latest_user[1] if request.latest_user else "")
    if request.top_k and needs_retrieval(query):
        if not request.explicit_query:
            query = build_query(query, request.recent_user_texts[:-1])
        vector = None
        if request.explicit_query is None and embedder is not None and request.latest_user:
            if request.latest_user[0] == request.last_embedded_seq:
                raw = await db.fetchval(LAST_USER_EMBEDDING, request.session_pk)
                vector = None if raw is None else _vector(raw)
        found = await hybrid_search(
            conn,
            user_pk=request.user_pk,
            query=query,
            k=request.top_k * 3,
            embedder=embedder if (vector is not None or request.explicit_query) else None,
            query_vector=vector,
        )
    # Pinned high-stakes facts come first and always; then the best matches, at most
    # PER_SESSION episodes of one past session so that a question spanning several
    # sessions sees several.
    seen = {m.id for m in pinned}
    per_session: dict[str, int] = {}
    best: list[MemoryRow] = []
    for m in found:
        if m.session_id == request.session_pk:
            continue  # this session is already here: its state and its recent turns
        origin = str(m.source.get("session_id")) if m.kind == "episode" else None
        if m.id in seen or (origin and per_session.get(origin, 0) >= PER_SESSION):
            continue
        if origin:
            per_session[origin] = per_session.get(origin, 0) + 1
        best.append(m)
        if len(best) == request.top_k:
            break
    ranked = pinned + best
    now = datetime.now(UTC)
    language = detect_language([query, *(m.text for m in ranked)])
    lines = [(m, _line(m, now, language)) for m in ranked]
    kept = pack_memories(
        lines, budget_tokens=request.budget_tokens, count=lambda p: count_tokens(p[1])
    )
    if not kept:
        return "", []
    text = "\n".join([HEADERS[language], *(line for _, line in kept)])
    return text, [m for m, _ in kept]


def _line(m: MemoryRow, now: datetime, language: str) -> str:
    tag = f", {PINNED[language]}" if m.pinned else ""
    # An episode is dated by when it happened (its turns' time), a fact by its age.
    when = str(m.source.get("from", ""))[:10] or age_label(m.last_confirmed_at, now)
    return f"- ({when}{tag}) {m.text}"


def _vector(raw: Any) -> list[float]:
    if isinstance(raw, str):
        return [float(x) for x in raw.strip("[]").split(",")]
    return [float(x) for x in raw]


def recent_user_texts(rows: Sequence[dict[str, Any]], limit: int = 4) -> list[str]:
    """The newest user texts among rows given newest first, returned oldest first."""
    texts = [r["content"] for r in rows if r["role"] == "user" and r["content"]][:limit]
    return list(reversed(texts))

"""The async engine. Built by the app factory / CLI from Settings and passed in."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def make_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        # asyncpg's statement cache is per connection; keep it, it is what makes the
        # hot paths (ingest, context) cheap.
        connect_args={"server_settings": {"application_name": "mnemo"}},
    )

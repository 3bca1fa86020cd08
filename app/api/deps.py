"""Dependencies shared by the routes, as Annotated aliases so signatures read as sentences."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.api.schemas import ID_PATTERN
from app.core.config import Settings

DEFAULT_TENANT = "default"


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_engine(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


async def get_tenant(request: Request) -> str:
    # One tenant until API keys exist; the key→tenant binding plugs in here.
    return DEFAULT_TENANT


async def read_connection(
    engine: Annotated[AsyncEngine, Depends(get_engine)],
) -> AsyncIterator[AsyncConnection]:
    async with engine.connect() as conn:
        yield conn


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated[AsyncEngine, Depends(get_engine)]
TenantDep = Annotated[str, Depends(get_tenant)]
ReadConnDep = Annotated[AsyncConnection, Depends(read_connection)]
SessionIdPath = Annotated[
    str, Path(pattern=ID_PATTERN, description="Client-chosen session id, 1–128 of [A-Za-z0-9._:@-]")
]
UserIdPath = Annotated[
    str, Path(pattern=ID_PATTERN, description="Client-chosen user id, 1–128 of [A-Za-z0-9._:@-]")
]

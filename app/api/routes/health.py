"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.deps import EngineDep

router = APIRouter(tags=["operations"])

VERSION = text("SELECT version_num FROM alembic_version")


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (says nothing about the database)."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request, engine: EngineDep) -> JSONResponse:
    """The database answers and its schema is at the migration head."""
    expected = request.app.state.head_revision
    try:
        async with engine.connect() as conn:
            current = (await conn.execute(VERSION)).scalar()
    except Exception as exc:  # any failure to reach the database means "not ready"
        return _not_ready(f"database unavailable: {type(exc).__name__}")
    if current != expected:
        return _not_ready(f"schema at {current}, expected {expected}; run `mnemo migrate`")
    return JSONResponse({"status": "ready", "schema": current})


def _not_ready(detail: str) -> JSONResponse:
    return JSONResponse(
        {
            "type": "https://mnemo.dev/problems/not-ready",
            "title": "Not ready",
            "status": 503,
            "detail": detail,
        },
        status_code=503,
        media_type="application/problem+json",
        headers={"Retry-After": "2"},
    )

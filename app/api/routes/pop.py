"""``DELETE /v1/sessions/{id}/turns/last``: remove and return the newest turn (an
extension of the v1 contract, for the OpenAI Agents SDK's ``Session.pop_item``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from app.api.deps import EngineDep, SessionIdPath, SettingsDep, TenantDep, own_session
from app.api.problems import COMMON_PROBLEMS, PROBLEM_TYPE_BASE
from app.api.schemas import PoppedTurnOut
from app.services import pop

router = APIRouter(
    prefix="/v1/sessions",
    tags=["sessions"],
    responses=COMMON_PROBLEMS,
    dependencies=[Depends(own_session)],
)


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        },
    }


@router.delete(
    "/{session_id}/turns/last",
    response_model=PoppedTurnOut,
    responses={
        404: _problem(
            "Unknown session (or another tenant's), or a session with no turn left"
            f" (type {PROBLEM_TYPE_BASE}no-turns)"
        ),
        409: _problem(
            "The newest turn was compacted into the task state and cannot be popped"
            f" (type {PROBLEM_TYPE_BASE}turn-compacted)"
        ),
    },
)
async def pop_turn(
    session_id: SessionIdPath, engine: EngineDep, tenant: TenantDep, settings: SettingsDep
) -> PoppedTurnOut:
    """Remove the session's newest turn and return it.

    Its seq is given back (the next message posted takes it: seqs stay gapless), the
    session's counters and the memory index rows derived from it go with it, and its
    message id is free again (posting it again stores it again). Not idempotent: a
    retry after a lost answer pops the turn before it.
    """
    async with engine.begin() as conn:
        popped = await pop.pop_turn(
            conn,
            tenant=tenant,
            session=session_id,
            job_max_attempts=settings.job_max_attempts,
            index_delay_s=settings.index_delay_s,
        )
    return PoppedTurnOut.model_validate(popped, from_attributes=True)

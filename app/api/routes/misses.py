"""Misses: the agent says what it needed that compression had taken away."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from app.api.deps import EngineDep, MetricsDep, SessionIdPath, SettingsDep, TenantDep, own_session
from app.api.problems import COMMON_PROBLEMS
from app.api.schemas import MissIn, MissOut, RestoredTurn
from app.services import misses

router = APIRouter(
    prefix="/v1/sessions",
    tags=["misses"],
    responses={**COMMON_PROBLEMS},
    dependencies=[Depends(own_session)],
)


@router.post("/{session_id}/misses", status_code=201, response_model=MissOut)
async def signal_miss(
    session_id: SessionIdPath,
    body: MissIn,
    engine: EngineDep,
    tenant: TenantDep,
    settings: SettingsDep,
    metrics: MetricsDep,
) -> MissOut:
    """Something the agent needed is not in its context: the archived turns that hold
    it come back into the state as pinned facts (with the turn they came from), and
    the incident is kept as a sample (`mnemo misses export`)."""
    async with engine.begin() as conn:
        miss = await misses.signal(
            conn, tenant=tenant, session=session_id, needed=body.needed, settings=settings
        )
    metrics.misses.labels("explicit", "restored" if miss.restored else "not_found").inc()
    return MissOut(
        id=miss.id,
        detection="explicit",
        needed=miss.needed,
        restored=[RestoredTurn(seq=f.seq, role=f.role, text=f.text) for f in miss.restored],
        state_version=miss.state_version,
    )

"""What a job handler receives: the job, and a commit that marks it done atomically.

A handler that changes state does so through ``JobContext.commit``, which marks
the job done in the same transaction: the effect is applied exactly once even
if the worker dies right after (the job is then done) or right before (the
job is claimed again after its lease and nothing was applied).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.config import Settings
from app.stores import queue
from app.stores.queue import Job

T = TypeVar("T")


class LeaseLost(Exception):
    """Another worker took the job after our lease expired; our work is rolled back."""


@dataclass
class JobContext:
    engine: AsyncEngine
    job: Job
    worker: str
    settings: Settings
    committed: bool = False

    async def commit(self, apply: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``apply`` and mark the job done, in one transaction."""
        async with self.engine.begin() as conn:
            result = await apply(conn)
            if not await queue.complete(conn, job_id=self.job.id, worker=self.worker):
                raise LeaseLost(f"job {self.job.id} is no longer ours")
        self.committed = True
        return result


Handler = Callable[[JobContext], Awaitable[None]]

"""Job handlers: what they declare, and what they receive.

A handler is a top-level ``async def name(ctx, deps)`` declared with ``@job(kind)``:
its kind (and with it its claim priority, ``JobKind.priority``) and, by its second
parameter's type, the dependencies it needs; the wiring binds those once
(``JobHandler.bind``).

A handler that changes state does so through ``JobContext.commit``, which marks
the job done in the same transaction: the effect is applied exactly once even
if the worker dies right after (the job is then done) or right before (the
job is claimed again after its lease and nothing was applied).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.core.config import Settings
from app.core.jobs import JobKind
from app.stores import queue
from app.stores.queue import Job

T = TypeVar("T")
D = TypeVar("D")


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


@dataclass(frozen=True)
class JobHandler(Generic[D]):
    """A declared handler: the kind of job it runs, and its body over its deps ``D``."""

    kind: JobKind
    run: Callable[[JobContext, D], Awaitable[None]]

    @property
    def priority(self) -> int:
        return self.kind.priority

    def bind(self, deps: D) -> Handler:
        """The handler the worker calls, with its dependencies given once."""
        run = self.run

        async def handle(ctx: JobContext) -> None:
            await run(ctx, deps)

        return handle


def job(kind: JobKind) -> Callable[[Callable[[JobContext, D], Awaitable[None]]], JobHandler[D]]:
    """Declare a top-level ``async def handler(ctx, deps)`` as the one for ``kind``."""

    def declare(run: Callable[[JobContext, D], Awaitable[None]]) -> JobHandler[D]:
        return JobHandler(kind=kind, run=run)

    return declare

"""Job handlers: what they declare, and what they receive.

A handler is a top-level ``async def name(ctx, deps)`` declared with ``@job(kind)``:
its kind (and with it its claim priority, ``JobKind.priority``) and, by its second
parameter's type, the dependencies it needs; the wiring binds those once
(``JobHandler.bind``).

A handler that changes state does so through ``JobContext.commit``, which marks
the job done in the same transaction: the effect is applied exactly once even
if the worker dies right after (the job is then done) or right before (the
job is claimed again after its lease and nothing was applied).

A handler declared with ``batch=N`` may be given up to N jobs of its kind and tenant
claimed together (``JobContext.jobs``: one model call and one write for all of
them); ``commit`` then marks every one of them done in that one transaction, or
none (a lease lost on any of them rolls the whole batch back), or, with ``of=job``,
that job alone with its own effect (a handler whose effects lock a row per job, so
that no lock is held for the whole batch's writes). A batch that fails
is retried job by job: each of its jobs is queued again with its attempt counted,
and a job claimed before runs alone (``Worker._run_job``), so a job that keeps
failing fails alone and the others of its batch go through on their next attempt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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
    # The jobs claimed with ``job`` for a batch handler (``job`` first); empty otherwise.
    batch: tuple[Job, ...] = ()
    # The ids of the jobs a ``commit`` marked done.
    done: set[int] = field(default_factory=set)

    @property
    def jobs(self) -> tuple[Job, ...]:
        """Every job this run answers for: the batch, or the one job."""
        return self.batch or (self.job,)

    @property
    def committed(self) -> bool:
        """Whether every job of the run was marked done by a ``commit``."""
        return all(j.id in self.done for j in self.jobs)

    @property
    def pending(self) -> list[Job]:
        """The jobs of the run no ``commit`` marked done yet."""
        return [j for j in self.jobs if j.id not in self.done]

    async def commit(
        self, apply: Callable[[AsyncConnection], Awaitable[T]], *, of: Job | None = None
    ) -> T:
        """Run ``apply`` and mark the job done, in one transaction: every job of a batch,
        or only ``of`` (a batch handler that commits each job's effect on its own)."""
        ids = [j.id for j in self.jobs] if of is None else [of.id]
        async with self.engine.begin() as conn:
            result = await apply(conn)
            done = await queue.complete_all(conn, job_ids=ids, worker=self.worker)
            if len(done) != len(ids):
                raise LeaseLost(f"job(s) {sorted(set(ids) - done)} no longer ours")
        self.done.update(ids)
        return result


Handler = Callable[[JobContext], Awaitable[None]]


@dataclass(frozen=True)
class BoundHandler:
    """A declared handler with its dependencies: what the worker calls for a job, or for
    a batch of up to ``batch`` jobs of its kind."""

    run: Callable[[JobContext], Awaitable[None]]
    batch: int = 1

    async def __call__(self, ctx: JobContext) -> None:
        await self.run(ctx)


@dataclass(frozen=True)
class JobHandler(Generic[D]):
    """A declared handler: the kind of job it runs, and its body over its deps ``D``."""

    kind: JobKind
    run: Callable[[JobContext, D], Awaitable[None]]
    batch: int = 1

    @property
    def priority(self) -> int:
        return self.kind.priority

    def bind(self, deps: D) -> Handler:
        """The handler the worker calls, with its dependencies given once."""
        run = self.run

        async def handle(ctx: JobContext) -> None:
            await run(ctx, deps)

        return BoundHandler(handle, batch=self.batch)


def batch_of(handler: Handler) -> int:
    """How many jobs of its kind ``handler`` takes at once (1: one at a time)."""
    return handler.batch if isinstance(handler, BoundHandler) else 1


def job(
    kind: JobKind, *, batch: int = 1
) -> Callable[[Callable[[JobContext, D], Awaitable[None]]], JobHandler[D]]:
    """Declare a top-level ``async def handler(ctx, deps)`` as the one for ``kind``; with
    ``batch`` > 1 it may be given up to that many waiting jobs of its kind at once."""

    def declare(run: Callable[[JobContext, D], Awaitable[None]]) -> JobHandler[D]:
        return JobHandler(kind=kind, run=run, batch=batch)

    return declare

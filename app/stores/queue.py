"""The job queue: a table in Postgres, written in the same transaction as the work
that causes it, claimed with FOR UPDATE SKIP LOCKED.

State machine of a job::

    queued ──claim──▶ running ──done──▶ done
      ▲                 │  └──error, attempts left──▶ queued (run_after = now + backoff)
      │                 └────error, no attempts left──▶ dead
      └──── lease expired (worker died), or handed back (worker stopped):
            claimable again as it stands

NOTIFY on ``mnemo_jobs`` is only a wake-up hint; workers poll as the guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.core import tracing
from app.core.jobs import priority_of
from app.stores.engine import plan_fence

CHANNEL = "mnemo_jobs"


@dataclass(frozen=True)
class Job:
    id: int
    tenant_id: str
    session_id: int | None
    kind: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    created_at: datetime


# enqueue: add a job unless an equal one already waits (same kind for the same
# session, or the same dedup key); the unique partial indexes decide.
# The NOTIFY rides in the same statement, and only when a job was really added.
ENQUEUE = text("""
    WITH added AS (
        INSERT INTO jobs (tenant_id, session_id, kind, payload, max_attempts, run_after,
                          dedup_key, priority)
        VALUES (:tenant_id, :session_id, :kind, :payload, :max_attempts,
                now() + make_interval(secs => :delay_s), :dedup_key, :priority)
        ON CONFLICT DO NOTHING
        RETURNING id)
    SELECT id, pg_notify(:channel, :kind) FROM added
""")


@dataclass(frozen=True)
class JobWanted:
    """A job a write causes, enqueued by that write's statement (``enqueue_for``): its
    kind and how it is run."""

    kind: str
    max_attempts: int
    delay_s: float = 0.0


def enqueue_for(
    rows: str, *, session_id: str = "NULL", payload: str = "", dedup_key: str = "NULL"
) -> str:
    """ENQUEUE as a part of a statement of another store, for a job its write causes:
    one job per row of ``rows`` (a CTE or subquery of that statement), unless an equal
    job already waits. The job's session, payload and dedup key are SQL over those rows;
    the trace context (``within_params``) is merged into the payload. The statement
    that embeds it as the CTE ``name`` sends the wake-up with ``notify_added(name)``."""
    base = payload or "'{}'::jsonb"
    traced = f"{base} || CAST(:job_payload AS jsonb)"
    return f"""
    INSERT INTO jobs (tenant_id, session_id, kind, payload, max_attempts, run_after,
                      dedup_key, priority)
    SELECT CAST(:job_tenant_id AS text), {session_id}, CAST(:job_kind AS text), {traced},
           CAST(:job_max_attempts AS integer),
           now() + make_interval(secs => CAST(:job_delay_s AS double precision)),
           {dedup_key}, CAST(:job_priority AS integer)
    FROM {rows}
    ON CONFLICT DO NOTHING
    RETURNING id
    """


def notify_added(cte: str) -> str:
    """A scalar subquery that sends the wake-up for each job the CTE ``cte`` added."""
    return f"(SELECT count(pg_notify(:job_channel, CAST(:job_kind AS text))) FROM {cte})"


# runnable: a job queued and due, or running with an expired lease (its worker
# died). A job whose session already has a running job of the same kind
# waits, so one session is never compressed twice at once: a queued job waits even
# while that running job's lease has expired (the stalled job is reclaimed itself),
# otherwise claiming it would collide with the one-running-job index, and, sorted
# first, it would make every claim of every worker fail. (``j`` is the candidate job.)
DUE = "j.status = 'queued' AND j.run_after <= now()"
STALLED = "j.status = 'running' AND j.locked_until < now()"
UNBLOCKED = """
    NOT EXISTS (
        SELECT 1 FROM jobs r
        WHERE r.session_id = j.session_id AND r.kind = j.kind AND r.id <> j.id
          AND r.status = 'running' AND (r.locked_until >= now() OR j.status = 'queued'))
"""
QUEUE_ORDER = "j.priority DESC, j.run_after, j.id"
# A waiting job due for longer than :aging_s seconds (aged) goes before every job due
# for less (fresh), whatever their priorities; among aged jobs the priority still
# decides. Without it a stream of compressions (priority 10) kept every background job
# (0, 5) waiting for as long as the stream lasted; with it a background job waits about
# :aging_s, as long as the compressions are claimed within :aging_s themselves. When
# they are not (the workers cannot keep up with the writes), aged compressions go first
# and background work waits again: the compressions shape the next context. (Aged jobs
# taken oldest first, whatever their kind, let a soak's compressions wait behind the
# whole background backlog: 0 compressions in 90 s.)
AGED = f"{DUE} AND j.run_after <= now() - make_interval(secs => :aging_s)"


def _first_runnable(name: str, which: str, *, where: str = "TRUE", n: str = "1") -> str:
    """A CTE locking the first ``n`` jobs, in the queue's order, of those ``which``
    (``DUE``, ``AGED`` or ``STALLED``) and ``where``; a waiting job is found by walking
    the index of waiting jobs in that order (``jobs_runnable_idx``), a stalled one by the
    index of leases (``jobs_lease_idx``), never by sorting every runnable job."""
    return f"""{name} AS MATERIALIZED (
        SELECT j.id, j.priority, j.run_after FROM jobs j
        WHERE {which} AND {where} AND {UNBLOCKED}
        ORDER BY {QUEUE_ORDER}
        LIMIT {n}
        FOR UPDATE SKIP LOCKED)"""


# claim: the first aged job (due past the aging bound) by priority, then due time; else
# the first runnable job in that order. Each candidate (the first aged one, the first
# waiting one, the first stalled one) is found by its index, and the first of them taken
# (the others' locks end with the statement; the aged and the first waiting may be one).
CLAIM = text(f"""
    WITH {_first_runnable("aged", AGED)},
    {_first_runnable("due", DUE)},
    {_first_runnable("stalled", STALLED)},
    picked AS (
        SELECT c.id FROM (
            SELECT *, TRUE AS aged FROM aged
            UNION ALL SELECT *, FALSE FROM due
            UNION ALL SELECT *, FALSE FROM stalled) AS c
        ORDER BY c.aged DESC, c.priority DESC, c.run_after, c.id
        LIMIT 1)
    UPDATE jobs SET status = 'running', attempts = attempts + 1, locked_by = :worker,
                    locked_until = now() + make_interval(secs => :lease_s), updated_at = now()
    FROM picked WHERE jobs.id = picked.id
    RETURNING jobs.id, jobs.tenant_id, jobs.session_id, jobs.kind, jobs.payload,
              jobs.attempts, jobs.max_attempts, jobs.created_at
""")

# claim_more: after a claim, up to :n more runnable jobs of the same kind and tenant
# (the same rule as CLAIM), for a handler that runs a batch of them together (one
# embedding call, one write). One tenant per batch: its transaction stays on one
# shard. Only waiting jobs never claimed before: one that failed (or whose worker
# died) runs alone, so a job that keeps failing holds no batch back. Jobs another
# worker holds are skipped, never waited for. The fence
# (``engine.plan_fence``; :n is at least 1): a generic plan made on a fresh database
# matched every job of the tenant against every picked one (9-21 ms instead of 0.7
# with 1,200 jobs, growing with the jobs kept).
BATCH_OF = "j.tenant_id = :tenant AND j.kind = :kind AND j.attempts = 0"
CLAIM_MORE = text(f"""
    WITH {_first_runnable("picked", DUE, where=BATCH_OF, n=":n")},
    fence AS MATERIALIZED ({plan_fence("CAST(:n AS integer) < 1")})
    UPDATE jobs SET status = 'running', attempts = attempts + 1, locked_by = :worker,
                    locked_until = now() + make_interval(secs => :lease_s), updated_at = now()
    FROM picked CROSS JOIN fence WHERE jobs.id = picked.id AND jobs.tenant_id = :tenant
    RETURNING jobs.id, jobs.tenant_id, jobs.session_id, jobs.kind, jobs.payload,
              jobs.attempts, jobs.max_attempts, jobs.created_at
""")

# extend_lease: long jobs (one, or a batch claimed together) say they are alive.
EXTEND_LEASE = text("""
    UPDATE jobs SET locked_until = now() + make_interval(secs => :lease_s), updated_at = now()
    WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'running' AND locked_by = :worker
""")

# complete: only the worker holding the lease may finish a job (one, or a batch in one
# statement); returns the ids it finished.
COMPLETE = text("""
    UPDATE jobs SET status = 'done', finished_at = now(), updated_at = now(),
                    locked_until = NULL, last_error = NULL
    WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'running' AND locked_by = :worker
    RETURNING id
""")

# retry_later: back to the queue after a failure, due after the backoff.
RETRY_LATER = text("""
    UPDATE jobs SET status = 'queued', locked_until = NULL, locked_by = NULL,
                    run_after = now() + make_interval(secs => :delay_s),
                    last_error = :error, updated_at = now()
    WHERE id = :id AND status = 'running' AND locked_by = :worker
""")

# hand_back: a stopping worker gives back every job it still holds (its runs were
# stopped and rolled back): claimable by any worker at once, as if its lease had
# expired. The job stays 'running' under no worker: it keeps its place in the
# one-running-job index, so its session's next job of its kind still waits for it, and
# no queued twin can collide with it. Its attempt is not counted: it was stopped, it did
# not fail (a job on its last attempt would otherwise be buried when claimed again).
HAND_BACK = text("""
    UPDATE jobs SET locked_until = now() - interval '1 second', locked_by = NULL,
                    attempts = attempts - 1, updated_at = now()
    WHERE status = 'running' AND locked_by = :worker
    RETURNING id
""")

# bury: the dead-letter state, kept for inspection.
BURY = text("""
    UPDATE jobs SET status = 'dead', locked_until = NULL, finished_at = now(),
                    last_error = :error, updated_at = now()
    WHERE id = :id AND status = 'running'
""")


# queued_compression: the compression already waiting for this session, if any.
QUEUED_COMPRESSION = text("""
    SELECT id FROM jobs WHERE session_id = :sid AND kind = 'compress' AND status = 'queued'
""")

# running_compression: the compression of this session a worker is running now.
RUNNING_COMPRESSION = text("""
    SELECT id FROM jobs WHERE session_id = :sid AND kind = 'compress' AND status = 'running'
""")

# make_manual: a waiting tiered compression becomes the "compress now" one asked for.
MAKE_MANUAL = text("""
    UPDATE jobs SET payload = jsonb_set(payload, '{trigger}', '"manual"'), run_after = now()
    WHERE id = :id AND status = 'queued'
""")

JOB_STATUS = text("SELECT status, last_error FROM jobs WHERE id = :id")

# queue_stats: queue depth by status and the age of the oldest waiting job.
QUEUE_STATS = text("""
    SELECT status, count(*) AS n,
           extract(epoch FROM now() - min(created_at)) AS age
    FROM jobs WHERE status IN ('queued', 'running', 'dead')
    GROUP BY status
""")

# oldest_due: how long the job that has been runnable longest has waited, in seconds
# (queued and due: a job waiting out a retry backoff is not late yet); the lag of the
# workers. Walks the partial index of waiting jobs, never the finished ones.
OLDEST_DUE = text("""
    SELECT extract(epoch FROM now() - min(run_after)) AS waited
    FROM jobs WHERE status = 'queued' AND run_after <= now()
""")

# oldest_unfinished: how long the oldest job of :kind not done yet (queued and due, or
# running: a worker that claimed it may get no CPU) has been due, in seconds. The
# waiting ones are found by the index of waiting jobs at their kind's :priority, the
# running ones by the index of leases: neither walks the other kinds' backlog.
OLDEST_UNFINISHED = text("""
    SELECT extract(epoch FROM now() - min(run_after)) AS waited FROM (
        SELECT run_after FROM jobs
        WHERE status = 'queued' AND priority = :priority AND kind = :kind
          AND run_after <= now()
        UNION ALL
        SELECT run_after FROM jobs WHERE status = 'running' AND kind = :kind) AS unfinished
""")


@dataclass(frozen=True)
class JobStatus:
    status: str
    last_error: str | None


@dataclass(frozen=True)
class StatusCount:
    """How many jobs are in ``status``, and the age in seconds of the oldest of them."""

    status: str
    n: int
    age_s: float


async def enqueue(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    session_id: int | None,
    kind: str,
    payload: dict[str, Any] | None = None,
    max_attempts: int,
    delay_s: float = 0.0,
    dedup_key: str | None = None,
) -> int | None:
    """Add a job in the caller's transaction; None when an equal job already waits.

    Its priority comes from its kind (``priority_of``): what the agent's next
    context depends on runs before background indexing.
    """
    row = (
        await conn.execute(
            ENQUEUE,
            {
                "tenant_id": tenant_id,
                "session_id": session_id,
                "kind": str(kind),
                "payload": _traced(payload),
                "max_attempts": max_attempts,
                "delay_s": delay_s,
                "dedup_key": dedup_key,
                "priority": priority_of(kind),
                "channel": CHANNEL,
            },
        )
    ).first()
    return None if row is None else int(row.id)


def within_params(
    *,
    tenant_id: str,
    kind: str,
    max_attempts: int,
    delay_s: float = 0.0,
) -> dict[str, Any]:
    """Bind parameters of ``enqueue_for`` (and ``notify_added``)."""
    return {
        "job_tenant_id": tenant_id,
        "job_kind": str(kind),
        "job_payload": _traced(None),
        "job_max_attempts": max_attempts,
        "job_delay_s": delay_s,
        "job_priority": priority_of(kind),
        "job_channel": CHANNEL,
    }


def _traced(payload: dict[str, Any] | None) -> dict[str, Any]:
    """The payload, with the trace context of whoever enqueues it when tracing is on."""
    context = tracing.carrier()
    return {**(payload or {}), tracing.TRACE_KEY: context} if context else payload or {}


def _job(row: Any) -> Job:
    return Job(
        id=row.id,
        tenant_id=row.tenant_id,
        session_id=row.session_id,
        kind=row.kind,
        payload=row.payload,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        created_at=row.created_at,
    )


async def claim(
    conn: AsyncConnection, *, worker: str, lease_s: float, aging_s: float = 60.0
) -> Job | None:
    """The next job for ``worker``: the first by priority of those due for more than
    ``aging_s``, else of all runnable ones (see CLAIM)."""
    row = (
        await conn.execute(CLAIM, {"worker": worker, "lease_s": lease_s, "aging_s": aging_s})
    ).first()
    return None if row is None else _job(row)


async def claim_more(
    conn: AsyncConnection, *, like: Job, n: int, worker: str, lease_s: float
) -> list[Job]:
    """Up to ``n`` more runnable jobs of ``like``'s kind and tenant, claimed at once."""
    if n < 1:
        return []
    rows = await conn.execute(
        CLAIM_MORE,
        {"tenant": like.tenant_id, "kind": like.kind, "n": n, "worker": worker, "lease_s": lease_s},
    )
    return sorted((_job(r) for r in rows), key=lambda j: j.id)


async def complete(conn: AsyncConnection, *, job_id: int, worker: str) -> bool:
    return bool(await complete_all(conn, job_ids=[job_id], worker=worker))


async def complete_all(conn: AsyncConnection, *, job_ids: list[int], worker: str) -> set[int]:
    """Finish the jobs of ``job_ids`` this worker still holds; returns those it finished."""
    rows = await conn.execute(COMPLETE, {"ids": job_ids, "worker": worker})
    return {int(r.id) for r in rows}


async def retry_later(
    conn: AsyncConnection, *, job_id: int, worker: str, delay_s: float, error: str
) -> None:
    await conn.execute(
        RETRY_LATER, {"id": job_id, "worker": worker, "delay_s": delay_s, "error": error[:4000]}
    )


async def hand_back(conn: AsyncConnection, *, worker: str) -> list[int]:
    """Give back every job ``worker`` holds, claimable at once; returns their ids."""
    return sorted(int(i) for i in (await conn.execute(HAND_BACK, {"worker": worker})).scalars())


async def bury(conn: AsyncConnection, *, job_id: int, error: str) -> None:
    await conn.execute(BURY, {"id": job_id, "error": error[:4000]})


async def extend_lease(
    conn: AsyncConnection, *, job_ids: list[int], worker: str, lease_s: float
) -> None:
    await conn.execute(EXTEND_LEASE, {"ids": job_ids, "worker": worker, "lease_s": lease_s})


async def queued_compression(conn: AsyncConnection, *, session_pk: int) -> int | None:
    found = (await conn.execute(QUEUED_COMPRESSION, {"sid": session_pk})).scalar_one_or_none()
    return None if found is None else int(found)


async def running_compression(conn: AsyncConnection, *, session_pk: int) -> int | None:
    found = (await conn.execute(RUNNING_COMPRESSION, {"sid": session_pk})).scalar_one_or_none()
    return None if found is None else int(found)


async def make_manual(conn: AsyncConnection, *, job_id: int) -> None:
    await conn.execute(MAKE_MANUAL, {"id": job_id})


async def job_status(conn: AsyncConnection, *, job_id: int) -> JobStatus:
    row = (await conn.execute(JOB_STATUS, {"id": job_id})).one()
    return JobStatus(status=row.status, last_error=row.last_error)


async def oldest_due_s(conn: AsyncConnection) -> float | None:
    """Seconds the longest-waiting due job has waited; None when no job is due."""
    waited = (await conn.execute(OLDEST_DUE)).scalar()
    return None if waited is None else float(waited)


async def oldest_unfinished_s(conn: AsyncConnection, *, kind: str) -> float | None:
    """Seconds since the oldest job of ``kind`` that is queued and due, or running, was
    due; None when there is none."""
    params = {"kind": str(kind), "priority": priority_of(kind)}
    waited = (await conn.execute(OLDEST_UNFINISHED, params)).scalar()
    return None if waited is None else float(waited)


async def queue_stats(conn: AsyncConnection) -> list[StatusCount]:
    return [
        StatusCount(status=r.status, n=r.n, age_s=float(r.age or 0))
        for r in await conn.execute(QUEUE_STATS)
    ]


# --- Operator tools: listing, statistics, requeue and prune (the CLI and /ui) ---------


@dataclass(frozen=True)
class JobRow:
    """A job as an operator sees it."""

    id: int
    tenant_id: str
    session: str | None  # the session's external id, when the job has one
    kind: str
    status: str
    attempts: int
    max_attempts: int
    run_after: datetime
    locked_by: str | None
    locked_until: datetime | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class KindStats:
    """Depth and age of one kind of job."""

    kind: str
    queued: int
    running: int
    dead: int
    done: int
    oldest_queued_s: float | None  # age of the oldest waiting job


# list_jobs: jobs by status (and kind, tenant), newest change first; tenant NULL = all.
LIST_JOBS = text("""
    SELECT j.id, j.tenant_id, s.external_id AS session, j.kind, j.status, j.attempts,
           j.max_attempts, j.run_after, j.locked_by, j.locked_until, j.last_error,
           j.created_at, j.finished_at
    FROM jobs j LEFT JOIN sessions s ON s.id = j.session_id
    WHERE (CAST(:tenant AS text) IS NULL OR j.tenant_id = :tenant)
      AND (CAST(:status AS text) IS NULL OR j.status = :status)
      AND (CAST(:kind AS text) IS NULL OR j.kind = :kind)
    ORDER BY j.updated_at DESC, j.id DESC
    LIMIT :limit
""")

# kind_stats: per kind, how many jobs wait, run, died and finished, and the oldest wait.
KIND_STATS = text("""
    SELECT kind,
           count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'running') AS running,
           count(*) FILTER (WHERE status = 'dead') AS dead,
           count(*) FILTER (WHERE status = 'done') AS done,
           extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'queued'))
               AS oldest_queued_s
    FROM jobs
    WHERE CAST(:tenant AS text) IS NULL OR tenant_id = :tenant
    GROUP BY kind
    ORDER BY kind
""")

# requeue: a dead job back to the queue with fresh attempts, unless an equal job
# already waits (the one-queued indexes would refuse it; a race with another requeue
# is answered by the caller from the unique violation).
REQUEUE = text("""
    WITH back AS (
        UPDATE jobs SET status = 'queued', attempts = 0, run_after = now(),
                        locked_by = NULL, locked_until = NULL, finished_at = NULL,
                        updated_at = now()
        WHERE id = :id AND status = 'dead'
          AND (CAST(:tenant AS text) IS NULL OR tenant_id = :tenant)
          AND NOT EXISTS (
              SELECT 1 FROM jobs q
              WHERE q.status = 'queued' AND q.id <> jobs.id
                AND ((q.session_id = jobs.session_id AND q.kind = jobs.kind)
                     OR q.dedup_key = jobs.dedup_key))
        RETURNING id, kind)
    SELECT id, pg_notify(:channel, kind) FROM back
""")

# dead_ids: the dead jobs a bulk requeue takes (optionally of one kind).
DEAD_IDS = text("""
    SELECT id FROM jobs
    WHERE status = 'dead' AND (CAST(:kind AS text) IS NULL OR kind = :kind)
      AND (CAST(:tenant AS text) IS NULL OR tenant_id = :tenant)
    ORDER BY id
""")

# prune: finished jobs older than the retention, in batches so one run never holds
# a long lock on the queue.
PRUNE = text("""
    DELETE FROM jobs WHERE id IN (
        SELECT id FROM jobs
        WHERE status = ANY(CAST(:statuses AS text[]))
          AND finished_at < now() - make_interval(secs => :older_than_s)
        LIMIT :batch)
""")


async def list_jobs(
    conn: AsyncConnection,
    *,
    tenant: str | None,
    status: str | None = None,
    kind: str | None = None,
    limit: int = 50,
) -> list[JobRow]:
    rows = await conn.execute(
        LIST_JOBS, {"tenant": tenant, "status": status, "kind": kind, "limit": limit}
    )
    return [JobRow(**r._asdict()) for r in rows]


async def kind_stats(conn: AsyncConnection, *, tenant: str | None) -> list[KindStats]:
    rows = await conn.execute(KIND_STATS, {"tenant": tenant})
    return [
        KindStats(
            kind=r.kind,
            queued=r.queued,
            running=r.running,
            dead=r.dead,
            done=r.done,
            oldest_queued_s=None if r.oldest_queued_s is None else float(r.oldest_queued_s),
        )
        for r in rows
    ]


async def requeue(conn: AsyncConnection, *, job_id: int, tenant: str | None) -> bool:
    """Put a dead job back in the queue; False when it is not dead (or not this tenant's)
    or an equal job already waits. May raise IntegrityError in a race; see REQUEUE."""
    row = (
        await conn.execute(REQUEUE, {"id": job_id, "tenant": tenant, "channel": CHANNEL})
    ).first()
    return row is not None


async def dead_job_ids(
    conn: AsyncConnection, *, tenant: str | None, kind: str | None = None
) -> list[int]:
    return [
        int(i) for i in (await conn.execute(DEAD_IDS, {"tenant": tenant, "kind": kind})).scalars()
    ]


async def prune(
    conn: AsyncConnection,
    *,
    older_than_s: float,
    statuses: tuple[str, ...] = ("done",),
    batch: int = 10_000,
) -> int:
    """Delete up to ``batch`` finished jobs older than ``older_than_s``; returns how many."""
    result = await conn.execute(
        PRUNE, {"older_than_s": older_than_s, "statuses": list(statuses), "batch": batch}
    )
    return int(result.rowcount or 0)

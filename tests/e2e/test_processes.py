"""More than one process on one database: the production shape (N API replicas and M
`mnemo worker` processes against one Postgres) and `mnemo serve --workers N`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from app.services.auth import CACHE_TTL_S
from app.supervisor import STANDBY_FLAG
from tests.conftest import _dsn
from tests.e2e.conftest import Server, start_server, wait_postgres_stopped

pytestmark = pytest.mark.e2e

# Small enough that a few dozen turns per session trigger compressions.
SMALL_WINDOW = {
    "MNEMO_MODEL_WINDOW_TOKENS": "1024",
    "MNEMO_SYSTEM_PROMPT_TOKENS": "0",
    "MNEMO_TOOL_SCHEMA_TOKENS": "0",
    "MNEMO_RESERVED_OUTPUT_TOKENS": "0",
    "MNEMO_MIN_TURNS_BEFORE_COMPRESSION": "8",
    "MNEMO_EMBEDDER": "hash",
    "MNEMO_JOB_POLL_INTERVAL_S": "0.2",
    "MNEMO_LOG_LEVEL": "WARNING",
}
SESSIONS = 6
BATCHES = 12  # per session, each of 4 messages
# serve's job worker at the API's own priority, for the tests of what serve runs rather
# than of the priorities it runs them at. An idle-class worker gets the CPU only when
# nothing else wants it: on a busy machine (the suite, other runs: load 5 and more on two
# cores) it runs nothing until the lag guard replaces it, and the niced replacement starts
# on a share of the CPU; a session's compression then took longer than the tests wait.
AT_FULL_PRIORITY = {"MNEMO_WORKER_IDLE": "false", "MNEMO_WORKER_NICE": "0"}
# A revoked key is refused by every replica once its lookup cache expired (docs/security.md).
REVOCATION_DELAY_S = CACHE_TTL_S


def _env(db_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
    return env | SMALL_WINDOW | {"MNEMO_DATABASE_URL": db_url}


def _mnemo(db_url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=_env(db_url),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@contextlib.contextmanager
def workers(db_url: str, n: int, log_dir: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = []
    try:
        for i in range(n):
            with (log_dir / f"worker-{i}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "app.cli", "worker"],
                        env=_env(db_url),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def _batch(session: int, b: int) -> list[dict[str, object]]:
    """Four messages of a step: a user request, a tool call, its result, a reply."""
    call = f"call-{session}-{b}"
    return [
        {
            "role": "user",
            "content": f"Step {b}: look up the order status for account {session}-{b} "
            "and keep the summary under two hundred words please.",
            "id": f"s{session}-b{b}-u",
        },
        {
            "role": "assistant",
            "content": None,
            "id": f"s{session}-b{b}-c",
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "order_status", "arguments": f'{{"n": {b}}}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call,
            "id": f"s{session}-b{b}-t",
            "content": json.dumps(
                {"status": "shipped", "eta_days": b, "note": "packed and labelled " * 6}
            ),
        },
        {"role": "assistant", "content": f"Order {b} has shipped.", "id": f"s{session}-b{b}-a"},
    ]


def _post_all(api: Server, work: list[tuple[int, int]], key: str) -> dict[str, int]:
    """Post each (session, batch) through ``api``; the acknowledged seq of every message id."""
    acked: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=api.url, timeout=30, headers=headers) as c:
        for session, b in work:
            body = {"user_id": f"u{session % 2}", "messages": _batch(session, b)}
            r = c.post(f"/v1/sessions/ps{session}/turns", json=body)
            assert r.status_code == 201, r.text
            for t in r.json()["turns"]:
                acked[t["id"]] = t["seq"]
    return acked


async def _archive(db_url: str) -> dict[str, list[tuple[str, int]]]:
    conn = await asyncpg.connect(_dsn(db_url, str(make_url(db_url).database)))
    try:
        rows = await conn.fetch(
            "SELECT s.external_id AS session, t.external_id, t.seq FROM turns t"
            " JOIN sessions s ON s.id = t.session_id ORDER BY s.external_id, t.seq"
        )
        events = await conn.fetch(
            "SELECT s.external_id AS session, e.state_version, e.turn_seqs, e.job_id"
            " FROM compression_events e JOIN sessions s ON s.id = e.session_id"
        )
    finally:
        await conn.close()
    out: dict[str, list[tuple[str, int]]] = {}
    for r in rows:
        out.setdefault(r["session"], []).append((r["external_id"], r["seq"]))
    out["__events__"] = [
        (f"{e['session']}|{e['state_version']}|{e['job_id']}", len(e["turn_seqs"])) for e in events
    ]
    out["__event_seqs__"] = [(e["session"], int(s)) for e in events for s in _seqs(e["turn_seqs"])]
    return out


def _seqs(value: object) -> list[int]:
    return list(json.loads(value) if isinstance(value, str) else value)  # type: ignore[arg-type]


def _wait_refused(api: Server, key: str, deadline: float) -> float | None:
    """Seconds until ``api`` answers the key with 401, or None past the deadline."""
    began = time.monotonic()
    with httpx.Client(base_url=api.url, timeout=5) as c:
        while time.monotonic() < deadline:
            r = c.get("/v1/sessions/ps0", headers={"Authorization": f"Bearer {key}"})
            if r.status_code == 401:
                return time.monotonic() - began
            assert r.status_code == 200, r.text
            time.sleep(0.1)
    return None


def test_two_api_processes_and_two_workers_share_one_database(db_url: str, tmp_path: Path) -> None:
    admin = _mnemo(db_url, "keys", "create", "--tenant", "default", "--scope", "admin")
    agent = _mnemo(db_url, "keys", "create", "--tenant", "default", "--scope", "agent")
    env = SMALL_WINDOW | {"MNEMO_DATABASE_URL": db_url, "MNEMO_EMBEDDED_WORKER": "false"}
    apis = [start_server(tmp_path, env=env), start_server(tmp_path, env=env)]
    try:
        with workers(db_url, 2, tmp_path):
            # Every session is posted to through both replicas, batches alternating.
            work = [[(s, b) for s in range(SESSIONS) for b in range(i, BATCHES, 2)] for i in (0, 1)]
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                results = list(pool.map(_post_all, apis, work, [agent, agent]))
            acked = results[0] | results[1]
            assert len(acked) == SESSIONS * BATCHES * 4

            # The workers drain the queue: no job left queued or running.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                pending = [
                    httpx.get(
                        f"{apis[s % 2].url}/v1/sessions/ps{s}",
                        headers={"Authorization": f"Bearer {admin}"},
                    ).json()["pending_jobs"]
                    for s in range(SESSIONS)
                ]
                if not any(pending):
                    break
                time.sleep(0.5)
            assert not any(pending), pending

            # A key revoked (by the operator's CLI, on the shared database) is refused by
            # both replicas within the documented delay, though each had it cached.
            for api in apis:
                r = httpx.get(
                    f"{api.url}/v1/sessions/ps0", headers={"Authorization": f"Bearer {agent}"}
                )
                assert r.status_code == 200
            _mnemo(db_url, "keys", "revoke", agent.split("_")[1])
            deadline = time.monotonic() + REVOCATION_DELAY_S + 1.5
            refused = [_wait_refused(api, agent, deadline) for api in apis]
            assert all(t is not None for t in refused), refused
    finally:
        for api in apis:
            api.stop()

    archive = asyncio.run(_archive(db_url))
    events = archive.pop("__events__")
    event_seqs = archive.pop("__event_seqs__")
    # Nothing lost, nothing twice: every acknowledged id once, at its acknowledged seq,
    # and each session's seqs gapless from 1.
    stored = {ext: seq for turns in archive.values() for ext, seq in turns}
    assert stored == acked
    for session, turns in archive.items():
        assert [seq for _, seq in turns] == list(range(1, len(turns) + 1)), session
    # Compressions happened, each once: one event per (session, state version), and no
    # turn compacted by two events.
    assert events, "no compression ran"
    assert len({name.rsplit("|", 1)[0] for name, _ in events}) == len(events)
    assert len(set(event_seqs)) == len(event_seqs)


def test_serve_workers_runs_api_processes_and_one_job_worker(data_dir: Path) -> None:
    """`mnemo serve --workers 2` on the embedded database: two API processes answer on one
    port, one `mnemo worker` runs the jobs (started again when it dies), and stopping the
    supervisor stops them all."""
    server = start_server(data_dir, env=SMALL_WINDOW | AT_FULL_PRIORITY, args=["--workers", "2"])
    try:
        children = _descendants(server.process.pid)
        commands = [_cmdline(pid) for pid in children]
        job_workers = [pid for pid in children if _is_job_worker(pid)]
        api_processes = [c for c in commands if any("spawn_main" in part for part in c)]
        assert len(job_workers) == 1, commands
        assert len(api_processes) == 2, commands
        # Each API process accepts on a listening socket of its own (SO_REUSEPORT): with
        # one socket shared, the first process to wake took every waiting connection.
        port = int(server.url.rsplit(":", 1)[1])
        api_pids = [pid for pid in children if any("spawn_main" in p for p in _cmdline(pid))]
        deadline = time.monotonic() + 30  # the second may still be starting
        while True:
            listening = [_listening_sockets(pid, port) for pid in api_pids]
            if all(listening) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [len(sockets) for sockets in listening] == [1, 1], listening
        assert listening[0] != listening[1], listening
        # The job worker dies: the supervisor starts another, which runs the jobs below.
        os.kill(job_workers[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            replaced = [
                pid
                for pid in _descendants(server.process.pid)
                if _is_job_worker(pid) and pid != job_workers[0] and _alive(pid)
            ]
            if replaced:
                break
            time.sleep(0.2)
        assert len(replaced) == 1, "the job worker was not started again"
        children = _descendants(server.process.pid)
        with httpx.Client(base_url=server.url, timeout=30) as c:
            for b in range(BATCHES):
                r = c.post("/v1/sessions/w0/turns", json={"user_id": "u", "messages": _batch(0, b)})
                assert r.status_code == 201, r.text
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                session = c.get("/v1/sessions/w0").json()
                if session["compressions"] and not session["pending_jobs"]:
                    break
                time.sleep(0.3)
            assert session["compressions"] >= 1, session
            assert (
                c.get("/v1/sessions/w0/turns", params={"limit": 1000}).json()["turns"][-1]["seq"]
                == BATCHES * 4
            )
    finally:
        server.stop()
    assert server.process.returncode is not None
    # Every child leaves with the supervisor (multiprocessing's resource tracker a moment
    # after it, when its pipe closes).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.1)
    assert not [_cmdline(pid) for pid in children if _alive(pid)]


def test_serve_runs_its_job_worker_in_a_child_process(data_dir: Path) -> None:
    """Plain `mnemo serve`: this process answers HTTP, one supervised `mnemo worker` child
    runs the jobs (the compression below), and SIGTERM stops the child and the embedded
    Postgres with the server.

    The child runs at SCHED_IDLE: on a busy machine (load 5 and more on two cores) it gets
    no CPU, and its jobs run once the lag guard (2 s here) has replaced it with a niced
    worker. The test holds either way: it checks the idle class on the first worker, the
    compression whichever worker ran it, and that worker's threads and counters when it
    was the first one."""
    server = start_server(data_dir, env=SMALL_WINDOW | {"MNEMO_WORKER_LAG_LIMIT_S": "2"})
    ours = os.getpriority(os.PRIO_PROCESS, 0)  # the suite may itself run niced
    idle = (os.SCHED_IDLE, max(ours, 10))
    try:
        children = _descendants(server.process.pid)
        workers = [pid for pid in children if _is_job_worker(pid)]
        assert len(workers) == 1, [_cmdline(p) for p in children]
        # Anything else is the worker's own (its isolated extraction process), not serve's;
        # a short-lived helper process that exited between the two reads of /proc is
        # nobody's (its command line already reads empty).
        theirs = set(_descendants(workers[0]))
        # serve's spare worker (niced, waiting to be switched to: app/supervisor.py): kept
        # only with MNEMO_WORKER_UNITS_LAG_LIMIT_S on, which is off by default.
        spares = [p for p in children if STANDBY_FLAG in _cmdline(p)]
        assert spares == [], [_cmdline(p) for p in spares]
        theirs |= set(spares) | {c for p in spares for c in _descendants(p)}
        others = [p for p in children if p not in theirs and p != workers[0] and _alive(p)]
        assert others == [], [_cmdline(p) for p in children]
        # The worker lowers itself first thing (at serve's priority until then): every
        # thread of it, and of what it has started by now, runs at the lowest priority.
        _new_job_worker(server, set(), lambda pid: _priorities(pid) == {idle})
        for pid in _descendants(workers[0]):
            assert _priorities(pid) == {idle}, _cmdline(pid)
        assert _priorities(server.process.pid) == {(os.SCHED_OTHER, ours)}
        with httpx.Client(base_url=server.url, timeout=30) as c:
            _compress_one_session(c)
            # The API's counters are its own; the worker's are the ones the running
            # worker published (a replacement starts from zero), so the rest is checked
            # when the first worker ran the jobs (a machine with idle CPU; a niced
            # replacement: the lag guard's test below).
            assert re.search(r"^mnemo_turns_ingested_total [1-9]", c.get("/metrics").text, re.M)
            first_ran = [p for p in _descendants(server.process.pid) if _is_job_worker(p)]
            if first_ran == workers:
                # Every thread of it and of its extraction process (the embedding model's
                # BLAS threads included, started at import) runs idle-class.
                for pid in [workers[0], *_descendants(workers[0])]:
                    assert _priorities(pid) == {idle}, _cmdline(pid)
                # /metrics has its counters beside the API process's own: what it
                # published (twice a second), so they come shortly after the job.
                metrics = _metrics_once(c, r"^mnemo_compressions_total\{.*\} [1-9]", wait_s=60)
                assert re.search(r"^mnemo_jobs_total\{.*\} [1-9]", metrics, re.M)
        # The worker's Postgres backends are niced like the worker; the API's are not.
        niceness = asyncio.run(_backend_niceness(data_dir))
        if first_ran == workers:  # (a replacement may be connecting right now)
            assert niceness.get("mnemo-worker") == {10}, niceness
            assert niceness.get("mnemo-worker-listen") == {10}, niceness
        assert niceness.get("mnemo") == {0}, niceness
    finally:
        # serve stops its worker first (SIGTERM; SIGKILL 30 s later): an idle-class worker
        # on a busy machine gets the CPU to exit late, past the fixture's 15 s, and a serve
        # killed then leaves its Postgres running (by design).
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.process.terminate()
            server.process.wait(60)
        server.stop()
    assert server.process.returncode is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.1)
    assert not [_cmdline(pid) for pid in children if _alive(pid)]
    wait_postgres_stopped(data_dir)


def test_a_starved_job_worker_is_replaced_by_a_niced_one_then_idle_again(
    data_dir: Path,
) -> None:
    """An idle-class worker that gets no CPU (here SIGSTOPped: what SCHED_IDLE gets on a
    machine whose CPU is never idle) lets the due jobs wait. Past MNEMO_WORKER_LAG_LIMIT_S
    serve starts a worker at its niceness alone, normal policy, which runs the backlog:
    every job once (one compression event per compression job, none dead), every turn
    once; then, the backlog cleared, an idle-class worker again."""
    env = SMALL_WINDOW | {"MNEMO_WORKER_LAG_LIMIT_S": "2", "MNEMO_JOB_LEASE_S": "3"}
    server, starved = start_with_a_starved_worker(data_dir, env)
    ours = os.getpriority(os.PRIO_PROCESS, 0)  # the suite may itself run niced
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            for session in range(3):
                for b in range(BATCHES):
                    r = c.post(
                        f"/v1/sessions/w{session}/turns",
                        json={"user_id": "u", "messages": _batch(session, b)},
                    )
                    assert r.status_code == 201, r.text
            # The worker serve starts instead: seen once it lowered itself (its first
            # line), and held still while its threads are read.
            niced = _new_job_worker(server, {starved}, lambda pid: _lowest_nice(pid) >= 10)
            os.kill(niced, signal.SIGSTOP)
            try:
                assert _priorities(niced) == {(os.SCHED_OTHER, max(ours, 10))}
            finally:
                os.kill(niced, signal.SIGCONT)
            _new_job_worker(
                server,
                {starved, niced},
                lambda pid: _priorities(pid) == {(os.SCHED_IDLE, max(ours, 10))},
                wait_s=180,
            )
            deadline = time.monotonic() + 60  # replaced ones are stopped, not waited for
            while time.monotonic() < deadline and (_alive(starved) or _alive(niced)):
                time.sleep(0.1)
            assert not _alive(starved) and not _alive(niced)
            # The idle-class worker runs what was left (the backlog counts as cleared
            # once no due job has waited more than a quarter of the limit).
            deadline = time.monotonic() + 120
            while True:
                sessions = [c.get(f"/v1/sessions/w{i}").json() for i in range(3)]
                if not any(s["pending_jobs"] for s in sessions):
                    break
                assert time.monotonic() < deadline, sessions
                time.sleep(0.3)
        assert all(s["compressions"] >= 1 and not s["pending_jobs"] for s in sessions), sessions
        jobs, events, turns = asyncio.run(_jobs_events_turns(data_dir))
        assert {status for status, _ in jobs} == {"done"}, jobs
        assert sum(kind == "compress" for _, kind in jobs) == events
        assert turns == {f"w{i}": list(range(1, BATCHES * 4 + 1)) for i in range(3)}
        log = server.log.read_text()
        assert log.index("restarts niced") < log.index("restarts idle"), log
    finally:
        server.stop()


def start_with_a_starved_worker(data_dir: Path, env: dict[str, str]) -> tuple[Server, int]:
    """`mnemo serve` and the pid of its job worker, SIGSTOPped: what an idle-class worker
    gets on a machine whose CPU is never idle."""
    server = start_server(data_dir, env=env)
    try:
        [starved] = [p for p in _descendants(server.process.pid) if _is_job_worker(p)]
        os.kill(starved, signal.SIGSTOP)
    except BaseException:
        server.stop()
        raise
    return server, starved


def _new_job_worker(
    server: Server, old: set[int], ready: Callable[[int], bool], wait_s: float = 60
) -> int:
    """The job worker serve runs now, once it is none of ``old`` and ``ready``."""
    deadline = time.monotonic() + wait_s
    while True:
        for pid in _descendants(server.process.pid):
            if pid not in old and _is_job_worker(pid):
                with contextlib.suppress(OSError):
                    if ready(pid):
                        return pid
        assert time.monotonic() < deadline, server.log.read_text()
        time.sleep(0.01)


def _lowest_nice(pid: int) -> int:
    return min(nice for _, nice in _priorities(pid))


async def _jobs_events_turns(
    data_dir: Path,
) -> tuple[list[tuple[str, str]], int, dict[str, list[int]]]:
    """(status, kind) of every job, the compression events, each session's turn seqs."""
    conn = await asyncpg.connect(host=str(data_dir / "pg"), user="postgres", database="mnemo")
    try:
        jobs = [(r["status"], r["kind"]) for r in await conn.fetch("SELECT * FROM jobs")]
        events = await conn.fetchval("SELECT count(*) FROM compression_events")
        rows = await conn.fetch(
            "SELECT s.external_id, t.seq FROM turns t JOIN sessions s ON s.id = t.session_id"
            " ORDER BY s.external_id, t.seq"
        )
    finally:
        await conn.close()
    turns: dict[str, list[int]] = {}
    for r in rows:
        turns.setdefault(r["external_id"], []).append(r["seq"])
    return jobs, int(events), turns


def test_a_killed_serve_leaves_no_job_worker_behind(data_dir: Path) -> None:
    """SIGKILL gives `mnemo serve` no chance to stop its worker: the worker notices it was
    orphaned and stops by itself (the embedded Postgres stays, by design: the fixture
    stops it)."""
    server = start_server(data_dir, env=SMALL_WINDOW | {"MNEMO_WORKER_UNITS_LAG_LIMIT_S": "2"})
    [job_worker] = [pid for pid in _descendants(server.process.pid) if _is_job_worker(pid)]
    # serve's spare worker (kept only with the units limit on) too: its stdin (the pipe
    # serve would tell it to work through) closes with serve.
    [spare] = [pid for pid in _descendants(server.process.pid) if STANDBY_FLAG in _cmdline(pid)]
    server.kill()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (_alive(job_worker) or _alive(spare)):
        time.sleep(0.1)
    assert not _alive(job_worker), _cmdline(job_worker)
    assert not _alive(spare), _cmdline(spare)


def test_a_worker_whose_supervisor_is_already_gone_stops(data_dir: Path) -> None:
    """The supervisor's pid is given, not read at start: a `mnemo serve` killed while its
    worker was still starting is noticed too (here the pid is not the parent at all)."""
    gone = _worker_supervised_by_init(data_dir)
    assert gone.returncode == 0, gone.stderr
    assert "the supervising process is gone" in gone.stderr


def test_a_supervised_worker_runs_without_its_metrics_port(data_dir: Path) -> None:
    """The loopback port `mnemo serve` picked for its worker's counters was taken before
    the worker bound it: the worker runs its jobs without them (restarting would fail the
    same way, and no job would run)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = _worker_supervised_by_init(
            data_dir,
            {"MNEMO_WORKER_METRICS_PORT": str(port), "MNEMO_WORKER_METRICS_HOST": "127.0.0.1"},
        )
    assert ran.returncode == 0, ran.stderr
    assert "no metrics server" in ran.stderr
    assert "the supervising process is gone" in ran.stderr


def _worker_supervised_by_init(
    data_dir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`mnemo worker --supervised-by 1`: its supervisor is not its parent, so it stops."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
    full |= SMALL_WINDOW | {"MNEMO_DATA_DIR": str(data_dir)} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "worker", "--supervised-by", "1"],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_serve_can_keep_its_job_worker_in_process(data_dir: Path) -> None:
    """MNEMO_WORKER_PROCESS=false: one process, which still runs the jobs."""
    server = start_server(data_dir, env=SMALL_WINDOW | {"MNEMO_WORKER_PROCESS": "false"})
    try:
        assert not [p for p in _descendants(server.process.pid) if _is_job_worker(p)]
        with httpx.Client(base_url=server.url, timeout=30) as c:
            _compress_one_session(c)
    finally:
        server.stop()
    wait_postgres_stopped(data_dir)


def _compress_one_session(c: httpx.Client) -> None:
    for b in range(BATCHES):
        r = c.post("/v1/sessions/w0/turns", json={"user_id": "u", "messages": _batch(0, b)})
        assert r.status_code == 201, r.text
    # A bound, not a speed: a niced worker that starts on a busy machine (the lag guard's)
    # gets a small share of the CPU.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        session = c.get("/v1/sessions/w0").json()
        if session["compressions"] and not session["pending_jobs"]:
            break
        time.sleep(0.3)
    assert session["compressions"] >= 1, session


def _metrics_once(c: httpx.Client, pattern: str, wait_s: float = 10.0) -> str:
    """/metrics once a line matches ``pattern`` (at most ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        metrics = c.get("/metrics").text
        if re.search(pattern, metrics, re.M) or time.monotonic() > deadline:
            assert re.search(pattern, metrics, re.M), metrics
            return metrics
        time.sleep(0.1)


def _priorities(pid: int) -> set[tuple[int, int]]:
    """(scheduling policy, niceness) of each thread of ``pid``."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            tid = int(task.name)
            found.add((os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)))
    return found


async def _backend_niceness(data_dir: Path) -> dict[str, set[int]]:
    """The niceness of the embedded database's client backends, by application name."""
    conn = await asyncpg.connect(host=str(data_dir / "pg"), user="postgres", database="mnemo")
    try:
        rows = await conn.fetch(
            "SELECT pid, application_name FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    found: dict[str, set[int]] = {}
    for r in rows:
        with contextlib.suppress(OSError):
            nice = os.getpriority(os.PRIO_PROCESS, r["pid"])
            found.setdefault(r["application_name"], set()).add(nice)
    return found


def _is_job_worker(pid: int) -> bool:
    """The `mnemo worker` a `mnemo serve` supervises (not its spare while it waits: its
    stdin still the pipe serve tells it to work through)."""
    command = _cmdline(pid)
    if command[2:4] != ["app.cli", "worker"] or "--supervised-by" not in command:
        return False
    try:
        return STANDBY_FLAG not in command or os.readlink(f"/proc/{pid}/fd/0") == os.devnull
    except OSError:  # it ended
        return False


def _descendants(pid: int) -> list[int]:
    out, pending = [], [pid]
    while pending:
        p = pending.pop()
        # Every thread's children: the supervisor starts a job worker again from a thread.
        kids = []
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                kids += [int(k) for k in (task / "children").read_text().split()]
        out.extend(kids)
        pending.extend(kids)
    return out


def _listening_sockets(pid: int, port: int) -> set[int]:
    """The inodes of the sockets listening on ``port`` that process ``pid`` holds."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                held.add(int(link[8:-1]))
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    listening.add(int(fields[9]))  # state 0A: LISTEN; field 9: inode
    return held & listening


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_stopped_worker_hands_its_jobs_back_and_the_next_one_runs_them_at_once(
    db_url: str, tmp_path: Path
) -> None:
    """`mnemo worker` gets SIGTERM while it holds jobs (caught holding them, and held
    still with SIGSTOP). It hands them back: a second worker runs them though
    their lease (600 s) is far from over; every turn is stored once and each compression
    happens once."""
    agent = _mnemo(db_url, "keys", "create", "--tenant", "default", "--scope", "agent")
    env = SMALL_WINDOW | {"MNEMO_DATABASE_URL": db_url, "MNEMO_EMBEDDED_WORKER": "false"}
    api = start_server(tmp_path, env=env)
    worker_env = _env(db_url) | {"MNEMO_JOB_LEASE_S": "600", "MNEMO_WORKER_STOP_GRACE_S": "0"}

    def start(i: int) -> subprocess.Popen[bytes]:
        with (tmp_path / f"worker-{i}.log").open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker"],
                env=worker_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    procs: list[subprocess.Popen[bytes]] = []
    try:
        acked = _post_all(api, [(s, b) for s in range(SESSIONS) for b in range(BATCHES)], agent)
        first = start(1)
        procs.append(first)
        name = f"{socket.gethostname()}:{first.pid}"
        held: list[int] = []
        deadline = time.monotonic() + 120
        while not held and time.monotonic() < deadline:
            if not asyncio.run(_held_by(db_url, name)):
                time.sleep(0.005)
                continue
            os.kill(first.pid, signal.SIGSTOP)
            time.sleep(0.05)  # a statement already sent finishes meanwhile
            held = asyncio.run(_held_by(db_url, name))
            if not held:  # caught between two jobs
                os.kill(first.pid, signal.SIGCONT)
        assert held, "the worker was never caught holding a job"
        first.terminate()
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(30) == 0
        assert asyncio.run(_held_by(db_url, name)) == []
        second = start(2)
        procs.append(second)
        deadline = time.monotonic() + 120  # well inside the lease of the handed-back jobs
        while asyncio.run(_not_done(db_url)):
            assert time.monotonic() < deadline, asyncio.run(_not_done(db_url))
            time.sleep(0.3)
    finally:
        for p in procs:
            p.terminate()
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
            p.wait(30)
        api.stop()
    archive = asyncio.run(_archive(db_url))
    events = archive.pop("__events__")
    event_seqs = archive.pop("__event_seqs__")
    assert {ext: seq for turns in archive.values() for ext, seq in turns} == acked
    assert events, "no compression ran"
    assert len({name.rsplit("|", 1)[0] for name, _ in events}) == len(events)
    assert len(set(event_seqs)) == len(event_seqs)
    assert len({job for _, _, job in (n.split("|") for n, _ in events)}) == len(events)


async def _held_by(db_url: str, worker: str) -> list[int]:
    conn = await asyncpg.connect(_dsn(db_url, str(make_url(db_url).database)))
    try:
        rows = await conn.fetch(
            "SELECT id FROM jobs WHERE status = 'running' AND locked_by = $1 ORDER BY id", worker
        )
    finally:
        await conn.close()
    return [r["id"] for r in rows]


async def _not_done(db_url: str) -> list[tuple[int, str, str]]:
    conn = await asyncpg.connect(_dsn(db_url, str(make_url(db_url).database)))
    try:
        rows = await conn.fetch("SELECT id, kind, status FROM jobs WHERE status <> 'done'")
    finally:
        await conn.close()
    return [(r["id"], r["kind"], r["status"]) for r in rows]

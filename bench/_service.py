"""Start the real service as a subprocess for a benchmark, and stop it again.

``running_service()`` runs ``python -m app.cli serve`` on a free loopback port,
with a fresh temporary ``MNEMO_DATA_DIR`` (so an embedded Postgres) unless a
database URL is given, and waits for ``/readyz``. The time from spawning the
process to the first ``200`` is the start-up time the benchmarks report.
``restart()`` stops it and starts it again on the same data, which measures a
warm start (existing cluster, schema already current).

Shared by the latency, soak and recall benchmarks; nothing here knows about them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.stores.embedded import throwaway_data_dir

REPO_ROOT = Path(__file__).resolve().parents[1]


class ServiceError(RuntimeError):
    """The service did not become ready, or died; the message ends with its log."""


LISTEN_WAIT_S = 30.0


@dataclass(frozen=True)
class ProcessCpu:
    """One server process's CPU at a reading (``Service.cpu_sample``)."""

    role: str  # "api", or "worker" for the job worker and its children
    parent: tuple[int, int] | None  # the parent's key when it is a server process too
    own_s: float  # user + system
    reaped_s: float  # its children's that it has waited for (cutime + cstime)


def cpu_by_role(
    before: Mapping[tuple[int, int], ProcessCpu], after: Mapping[tuple[int, int], ProcessCpu]
) -> dict[str, float]:
    """CPU each role used between two ``cpu_sample`` readings.

    A process that ended between them (``serve`` replacing its job worker) is no longer
    in ``after``, but its parent's reaped figure grew by its whole life's CPU: the part
    already spent at ``before`` is taken off and the rest counted to the ended process's
    role. Subtracting per-role totals instead went negative on such a swap."""
    spent = {"api": 0.0, "worker": 0.0}
    for key, now in after.items():
        then = before.get(key)
        spent[now.role] += now.own_s - (then.own_s if then else 0.0)
        reaped = now.reaped_s - (then.reaped_s if then else 0.0)
        if reaped <= 0:
            continue
        ended = [p for k, p in before.items() if k not in after and p.parent == key]
        reaped -= sum(p.own_s + p.reaped_s for p in ended)
        role = ended[0].role if ended else now.role
        spent[role] += max(reaped, 0.0)
    return spent


def listening_sockets(port: int) -> int:
    """How many TCP sockets listen on ``port`` on this machine (Linux's /proc)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


def free_port() -> int:
    """A loopback port nobody listens on right now (racy, as all such helpers are)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    """A running ``mnemo serve``; built by ``running_service()``."""

    data_dir: Path
    database_url: str | None
    extra_env: Mapping[str, str]
    ready_timeout_s: float
    workers: int = 1  # `mnemo serve --workers N` when above 1
    code: Path = REPO_ROOT  # the checkout whose `app` is served (bench.side_by_side)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    start_s: float = 0.0
    starts: list[float] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "serve.log"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> float:
        """Spawn the server and wait for ``/readyz``; return the seconds it took."""
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
        env.update(
            {
                "MNEMO_DATA_DIR": str(self.data_dir),
                "MNEMO_LOG_LEVEL": "WARNING",
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(self.code), os.environ.get("PYTHONPATH")) if p
                ),
            }
        )
        if self.database_url:
            env["MNEMO_DATABASE_URL"] = self.database_url
        env.update(self.extra_env)
        cmd = [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        if self.workers > 1:
            cmd += ["--workers", str(self.workers)]
        # cwd is the data dir, so a developer's ./.env cannot reconfigure the run.
        with open(self.log_path, "ab") as log:
            began = time.perf_counter()
            self.process = subprocess.Popen(
                cmd,
                cwd=self.data_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.start_s = self._wait_ready(began)
        self.starts.append(self.start_s)
        return self.start_s

    def _wait_ready(self, began: float) -> float:
        deadline = began + self.ready_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.perf_counter() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise ServiceError(
                        f"mnemo serve exited with {self.process.returncode}\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{self.base_url}/readyz").status_code == 200:
                        self._wait_listening(deadline)
                        return time.perf_counter() - began
                time.sleep(0.05)
        self.stop()
        raise ServiceError(f"not ready after {self.ready_timeout_s:.0f} s\n{self.log_tail()}")

    def _wait_listening(self, deadline: float) -> None:
        """With ``--workers N``, until N sockets listen on the port (each API process has
        its own, SO_REUSEPORT), at most ``LISTEN_WAIT_S``: the first process answers
        /readyz while the others may still be starting, and keep-alive clients that
        connect then all stay on the first one. (One shared socket never shows N.)"""
        if self.workers < 2:
            return
        until = min(deadline, time.perf_counter() + LISTEN_WAIT_S)
        while time.perf_counter() < until and listening_sockets(self.port) < self.workers:
            time.sleep(0.1)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (uvicorn's graceful shutdown), then SIGKILL of the process group."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def restart(self) -> float:
        self.stop()
        return self.start()

    def _tree(self) -> Iterator[tuple[int, str]]:
        """(pid, /proc/PID/stat after the command name) of the server and its live
        descendants (``--workers`` processes, the job worker); the embedded Postgres
        daemonises and is not among them. Empty when the server itself is gone."""
        if self.process is None:
            return
        pending = [self.process.pid]
        while pending:
            pid = pending.pop()
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1]
            except OSError:
                if pid == self.process.pid:
                    return
                continue
            yield pid, stat
            # Every thread's children (`serve` restarts its job worker from one).
            for task in Path(f"/proc/{pid}/task").glob("*"):
                with contextlib.suppress(OSError):
                    pending.extend(int(c) for c in (task / "children").read_text().split())

    def cpu_seconds(self) -> float | None:
        """User + system CPU the server's processes have used so far (Linux only),
        children they have reaped included: a job worker that ``serve`` replaced
        keeps counting, so the figure never goes down between two readings."""
        sample = self.cpu_sample()
        return sum(p.own_s + p.reaped_s for p in sample.values()) if sample else None

    def cpu_sample(self) -> dict[tuple[int, int], ProcessCpu] | None:
        """Every server process's CPU so far, keyed by (pid, start time) so that a
        reused pid is a new process; ``cpu_by_role`` subtracts two of these."""
        ticks = os.sysconf("SC_CLK_TCK")
        sample: dict[tuple[int, int], ProcessCpu] = {}
        workers: set[int] = set()
        keys: dict[int, tuple[int, int]] = {}
        for pid, stat in self._tree():
            fields = stat.split()  # fields[0] is the state: stat(5)'s field 3
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if b"worker" in argv:
                    workers.add(pid)
            parent = int(fields[1])
            if parent in workers:  # a parent comes first
                workers.add(pid)
            keys[pid] = (pid, int(fields[19]))
            sample[keys[pid]] = ProcessCpu(
                role="worker" if pid in workers else "api",
                parent=keys.get(parent),
                own_s=(int(fields[11]) + int(fields[12])) / ticks,
                reaped_s=(int(fields[13]) + int(fields[14])) / ticks,
            )
        return sample or None

    def rss_mib(self) -> float | None:
        """Resident memory of the server's processes, summed (shared pages counted in each)."""
        total, seen = 0, False
        for pid, _ in self._tree():
            seen = True
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total / 1024 if seen else None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def running_service(
    *,
    database_url: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    ready_timeout_s: float = 180.0,
    keep_data: bool = False,
    workers: int = 1,
) -> Iterator[Service]:
    """A started service; stopped (and its temporary data removed) on exit."""
    with throwaway_data_dir("mnemo-bench-", keep=keep_data) as data_dir:
        service = Service(
            data_dir=data_dir,
            database_url=database_url,
            extra_env=dict(extra_env or {}),
            ready_timeout_s=ready_timeout_s,
            workers=workers,
        )
        try:
            service.start()
            yield service
        finally:
            service.stop()  # then the data dir's Postgres, left running by design
            if keep_data:
                print(f"kept {data_dir}", file=sys.stderr)

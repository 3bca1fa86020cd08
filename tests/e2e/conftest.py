"""Start the real `mnemo serve` as a subprocess on a free port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.stores.embedded import stop_embedded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    started_in_s: float
    log: Path

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self, wait_s: float = 15) -> None:
        """SIGTERM, and SIGKILL if serve has not exited ``wait_s`` later (a serve killed
        that way leaves its embedded Postgres running, by design)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_postgres_stopped(data_dir: Path, wait_s: float = 60.0) -> None:
    """Until the embedded Postgres serve asked to stop has stopped (its pid file gone).
    serve waits 15 s for it; its shutdown checkpoint can take longer on a busy machine,
    and it finishes on its own after serve has exited."""
    pidfile = data_dir / "pg" / "postmaster.pid"
    deadline = time.monotonic() + wait_s
    while pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pidfile.exists()


def start_server(
    data_dir: Path,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 60,
    mnemo: list[str] | None = None,
    cwd: Path | None = None,
    args: list[str] | None = None,
) -> Server:
    """``mnemo serve`` (by default this checkout's, ``python -m app.cli``) on a free port."""
    port = free_port()
    log = data_dir / f"serve-{port}.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
    full_env.update({"MNEMO_DATA_DIR": str(data_dir), "MNEMO_JOB_POLL_INTERVAL_S": "0.2"})
    full_env.update(env or {})
    t0 = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                *(mnemo or [sys.executable, "-m", "app.cli"]),
                "serve",
                "--port",
                str(port),
                *(args or []),
            ],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() - t0 < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"mnemo serve exited early:\n{log.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return Server(process, url, time.monotonic() - t0, log)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"mnemo serve not ready in {timeout_s}s:\n{log.read_text()}")


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    stop_embedded(tmp_path)  # a SIGKILLed Mnemo leaves its Postgres running (by design)


def create_key(data_dir: Path, tenant: str = "fuzz", scope: str = "admin") -> str:
    """`mnemo keys create` against the embedded database in ``data_dir``; the key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
    env["MNEMO_DATA_DIR"] = str(data_dir)
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "create", "--tenant", tenant, "--scope", scope],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mnemo keys create failed ({done.returncode}):\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]

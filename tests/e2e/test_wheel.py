"""The wheel as a user installs it: built, installed in a fresh venv outside the
checkout, then `mnemo migrate`, `mnemo serve` and a request.

Guards the packaging: migrations and alembic.ini are package data, the tokenizer
table ships, the declared dependencies are enough, and nothing is read from the
source tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import start_server

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=480
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_installed_wheel_migrates_serves_and_answers(data_dir: Path, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT, cwd=tmp_path)
    (wheel,) = dist.glob("mnemo_server-*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=tmp_path)

    away = tmp_path / "elsewhere"  # neither the checkout nor the venv: nothing found by cwd
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
    env["MNEMO_DATA_DIR"] = str(data_dir)
    where = run(venv / "bin" / "python", "-c", "import app; print(app.__file__)", cwd=away)
    assert where.strip().startswith(str(venv))
    assert "migrations applied" in run(venv / "bin" / "mnemo", "migrate", cwd=away, env=env)

    server = start_server(data_dir, mnemo=[str(venv / "bin" / "mnemo")], cwd=away)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            r = c.post(
                "/v1/sessions/s-1/turns",
                json={"user_id": "u-1", "messages": [{"role": "user", "content": "Hello."}]},
            )
            assert r.status_code == 201, r.text
            assert c.get("/readyz").json()["status"] == "ready"  # the packaged head revision
            ctx = c.get("/v1/sessions/s-1/context").json()
            assert [m["content"] for m in ctx["messages"]] == ["Hello."]
    finally:
        server.stop()

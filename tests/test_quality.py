"""The strict gates run with the suite: lint and types (no separate command to forget)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff() -> None:
    result = run(
        str(Path(sys.executable).parent / "ruff"), "check", "app", "tests", "bench", "tools"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = run(sys.executable, "-m", "mypy", "app")
    assert result.returncode == 0, result.stdout + result.stderr

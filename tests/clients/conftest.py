"""Clients of this repository against a real `mnemo serve` (one per test module)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.stores.embedded import throwaway_data_dir
from tests.e2e.conftest import Server, start_server

ROOT = Path(__file__).resolve().parents[2]
# The Python client is its own distribution (clients/python); tests import it in place.
sys.path.insert(0, str(ROOT / "clients" / "python"))


NODE, NPM = shutil.which("node"), shutil.which("npm")
needs_node = pytest.mark.skipif(
    NODE is None or NPM is None, reason="node and npm are not installed"
)


def run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command to completion; its stdout, or a failure showing both streams."""
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def build_typescript(source: Path, work: Path) -> Path:
    """Copy a TypeScript package (no node_modules, no dist), `npm ci` and compile it."""
    shutil.copytree(source, work, ignore=shutil.ignore_patterns("node_modules", "dist"))
    run([str(NPM), "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=work)
    run([work / "node_modules" / ".bin" / "tsc", "-p", "."], cwd=work)
    return work


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with throwaway_data_dir("mnemo-clients-") as folder:
        running = start_server(folder, env={"MNEMO_EMBEDDER": "hash"})
        try:
            yield running
        finally:
            running.stop()

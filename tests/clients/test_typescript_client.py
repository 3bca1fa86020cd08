"""The TypeScript client (clients/typescript): its types are what openapi-typescript
makes of docs/openapi.json, it compiles under `strict`, and its node:test suite passes
against a real `mnemo serve`. Needs node and npm (the registry, for `npm ci`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.clients.conftest import ROOT
from tests.e2e.conftest import Server

NODE, NPM = shutil.which("node"), shutil.which("npm")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(NODE is None or NPM is None, reason="node and npm are not installed"),
]


def run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_typescript_client_against_the_server(server: Server, tmp_path: Path) -> None:
    work = tmp_path / "typescript"
    shutil.copytree(
        ROOT / "clients" / "typescript",
        work,
        ignore=shutil.ignore_patterns("node_modules", "dist"),
    )
    run([str(NPM), "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=work)
    bin_dir = work / "node_modules" / ".bin"

    generated = tmp_path / "schema.ts"
    run(
        [
            bin_dir / "openapi-typescript",
            ROOT / "docs" / "openapi.json",
            "--default-non-nullable",
            "false",
            "-o",
            generated,
        ],
        cwd=work,
    )
    committed = (work / "src" / "schema.ts").read_text()
    assert generated.read_text() == committed, "stale: cd clients/typescript && npm run generate"

    run([bin_dir / "tsc", "-p", "."], cwd=work)
    env = {**os.environ, "MNEMO_URL": server.url}
    env.pop("MNEMO_API_KEY", None)
    out = run([str(NODE), "--test", "dist/test/"], cwd=work, env=env)
    assert "# fail 0" in out and "# pass 0" not in out, out

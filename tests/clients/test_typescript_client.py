"""The TypeScript client (clients/typescript): its types are what openapi-typescript
makes of docs/openapi.json, it compiles under `strict`, and its node:test suite passes
against a real `mnemo serve`. Needs node and npm (the registry, for `npm ci`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.clients.conftest import NODE, ROOT, build_typescript, needs_node, run
from tests.e2e.conftest import Server

pytestmark = [pytest.mark.e2e, needs_node]


def test_typescript_client_against_the_server(server: Server, tmp_path: Path) -> None:
    work = build_typescript(ROOT / "clients" / "typescript", tmp_path / "typescript")
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

    env = {**os.environ, "MNEMO_URL": server.url}
    env.pop("MNEMO_API_KEY", None)
    out = run([str(NODE), "--test", "dist/test/"], cwd=work, env=env)
    assert "# fail 0" in out and "# pass 0" not in out, out

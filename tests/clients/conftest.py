"""Clients of this repository against a real `mnemo serve` (one per test module)."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Server, start_server, stop_embedded_postgres

ROOT = Path(__file__).resolve().parents[2]
# The Python client is its own distribution (clients/python); tests import it in place.
sys.path.insert(0, str(ROOT / "clients" / "python"))


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    folder = Path(tempfile.mkdtemp(prefix="mnemo-clients-"))
    running = start_server(folder, env={"MNEMO_EMBEDDER": "hash"})
    try:
        yield running
    finally:
        running.stop()
        stop_embedded_postgres(folder)

"""The process entry points: the app factory uvicorn and the tests import (built in
``app/wiring.py``), and ``python -m app.main``, which prints the OpenAPI document
the server serves (for docs/openapi.json)."""

from __future__ import annotations

import json

from app.core.config import Settings
from app.wiring import create_app

__all__ = ["create_app"]


def print_openapi() -> None:
    """Print the document the server serves (for docs/openapi.json)."""
    app = create_app(Settings(_env_file=None), database_url="postgresql+asyncpg://unused/x")  # type: ignore[call-arg]
    print(json.dumps(app.openapi(), indent=2, ensure_ascii=False))


if __name__ == "__main__":
    print_openapi()

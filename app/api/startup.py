"""Work a first request would do, done while the app starts (before its port opens)."""

from __future__ import annotations

import contextlib

from fastapi import FastAPI
from starlette.routing import NoMatchFound


def build_routes(app: FastAPI) -> None:
    """Build every route's request handling now. FastAPI builds an included router's
    routes (each one's dependency tree, parameter and response validators) when a
    request first reaches that router: the first ``GET /context`` after a start built
    the session routes' and took ~0.5 s longer than the next ones. A lookup by a name no
    route has walks every route, building each."""
    with contextlib.suppress(NoMatchFound):
        app.url_path_for("mnemo: no route has this name")

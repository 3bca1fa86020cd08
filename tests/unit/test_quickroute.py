"""``QuickRoute`` answers a well-formed request without FastAPI's solving only while the
route depends on nothing it does not call itself: a route with any other dependency,
or a parameter it cannot read, keeps FastAPI's handler (the dependency runs)."""

from __future__ import annotations

from typing import Annotated, Any

import fastapi.routing
import httpx
import pytest
from fastapi import Depends, FastAPI, Header, Query, Request, Response

from app.api.deps import PrincipalDep
from app.api.quickroute import QuickRoute
from app.stores.api_keys import Principal

RAN: list[str] = []


class Guard:
    async def principal(self, key: str | None) -> Principal:
        return Principal(tenant_id="t", scope="admin", key_id=None)


async def audit(request: Request) -> None:
    RAN.append(request.url.path)


async def plain(
    name: str, request: Request, principal: PrincipalDep, n: Annotated[int, Query(le=9)] = 1
) -> Response:
    return Response(f"{name} {n} {principal.tenant_id}")


async def audited(
    name: str, request: Request, principal: PrincipalDep, seen: Annotated[None, Depends(audit)]
) -> Response:
    return Response(name)


async def with_header(
    name: str, request: Request, principal: PrincipalDep, x: Annotated[str, Header()] = ""
) -> Response:
    return Response(f"{name} {x}")


def app_with(endpoint: Any) -> FastAPI:
    app = FastAPI()
    app.state.guard = Guard()
    app.router.add_api_route("/things/{name}", endpoint, route_class_override=QuickRoute)
    return app


async def test_quick_only_while_the_route_depends_on_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    solved: list[str] = []
    solve = fastapi.routing.solve_dependencies

    async def counted(*args: Any, **kwargs: Any) -> Any:
        solved.append(kwargs["request"].url.path)
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    RAN.clear()
    for endpoint, url, body in (
        (plain, "/things/a?n=3", "a 3 t"),
        (plain, "/things/a?n=10", None),  # refused: FastAPI's handler, its 422
        (audited, "/things/b", "b"),
        (with_header, "/things/c", "c h"),
    ):
        transport = httpx.ASGITransport(app=app_with(endpoint))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.get(url, headers={"x": "h"})
        if body is None:
            assert r.status_code == 422
        else:
            assert (r.status_code, r.text) == (200, body)
    assert solved == ["/things/a", "/things/b", "/things/c"]
    assert RAN == ["/things/b"]

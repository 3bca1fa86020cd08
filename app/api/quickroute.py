"""``QuickRoute``: a hot route's well-formed requests without FastAPI's solving.

FastAPI solves a route's whole tree on every request: it looks each parameter's
annotation up again and walks every dependency node (about 10 µs a node). On the hot
reads (``GET /context``, the memory search) that was a sixth of a read's CPU and more
than the search's own Python outside the embedding.

A ``QuickRoute`` validates the route's path and query parameters in one step, with a
model built from their own declarations (the same types and constraints, so the same
values), then calls what the tree would call, in FastAPI's order: the caller's
principal (``get_principal`` with the bearer scheme), ``own_session`` when the route
depends on it, then the endpoint. A request that model refuses goes through FastAPI's
handler, which answers it as it always did (its 422 problem, or the 401 it raises
first), as does every request while a dependency is overridden or FastAPI's telemetry
traces. A route that depends on anything else, or takes a parameter this cannot read,
keeps FastAPI's handler for good. The OpenAPI description is FastAPI's, from the
endpoint's signature.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi._compat import is_scalar_field
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.telemetry import get_telemetry_data
from pydantic import ValidationError, create_model

from app.api.deps import bearer, get_principal, own_session

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def calls(dependant: Dependant) -> set[Any]:
    """Every function ``dependant``'s tree calls."""
    return {d.call for d in dependant.dependencies} | {
        c for d in dependant.dependencies for c in calls(d)
    }


class QuickRoute(APIRoute):
    def get_route_handler(self) -> Handler:
        standard = super().get_route_handler()
        tree = self.dependant
        found = calls(tree)
        principal_as = [d.name for d in tree.dependencies if d.call is get_principal and d.name]
        declared = [*tree.path_params, *tree.query_params]
        owned = own_session in found
        if (
            not found <= {get_principal, bearer, own_session}
            or len(principal_as) != 1
            or (owned and "session_id" not in {f.name for f in tree.path_params})
            or tree.request_param_name != "request"
            or tree.header_params
            or tree.cookie_params
            or tree.body_params
            or not all(is_scalar_field(f) for f in tree.query_params)
            or tree.websocket_param_name
            or tree.http_connection_param_name
            or tree.response_param_name
            or tree.background_tasks_param_name
            or tree.security_scopes_param_name
        ):
            return standard
        params = create_model(  # type: ignore[call-overload]
            f"{self.name}_parameters",
            **{f.name: (f.field_info.annotation, f.field_info) for f in declared},
        )
        endpoint, named = self.endpoint, principal_as[0]
        overrides = self.dependency_overrides_provider

        async def handler(request: Request) -> Response:
            if getattr(overrides, "dependency_overrides", None) or get_telemetry_data() is not None:
                return await standard(request)
            try:
                # A repeated parameter: the last value, as FastAPI takes it.
                values = params.model_validate(
                    {**request.query_params, **request.path_params}
                ).__dict__
            except ValidationError:
                return await standard(request)
            principal = await get_principal(request, await bearer(request))
            if owned:
                await own_session(values["session_id"], request, principal)
            response: Response = await endpoint(request=request, **{named: principal}, **values)
            return response

        return handler

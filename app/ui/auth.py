"""Who is looking at /ui: an admin key, entered once on the login page and kept for
the browser session in an HttpOnly cookie (never in a URL, a page or a log).

The cookie holds the key itself, checked by the same guard as the API on every
request, so revoking the key ends every browser session within the guard's cache
window, and any replica can serve any page. ``SameSite=Strict`` keeps other sites
from sending it; state-changing forms are also refused when the browser says they
come from another origin.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request

from app.core.errors import Forbidden, MnemoError, Unauthorized
from app.services.auth import Guard
from app.stores.api_keys import Principal

COOKIE = "mnemo_ui"
PATH = "/ui"


class LoginRequired(MnemoError):
    """No valid key for /ui: pages answer with the login page instead."""

    status = 401
    title = "Login required"
    slug = "login-required"


async def principal_of(request: Request, key: str | None) -> Principal:
    guard: Guard = request.app.state.guard
    principal = await guard.principal(key)
    if principal.scope != "admin":
        raise Forbidden("the inspector needs a key with the admin scope")
    return principal


async def ui_principal(request: Request) -> Principal:
    try:
        principal = await principal_of(request, request.cookies.get(COOKIE))
    except Unauthorized as exc:
        raise LoginRequired(exc.detail) from None
    request.state.tenant = principal.tenant_id
    return principal


def same_origin(request: Request) -> None:
    """Refuse a form posted from another site (belt and braces with SameSite)."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise Forbidden("cross-site form")
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise Forbidden("cross-origin form")


async def ui_action(
    request: Request, principal: Annotated[Principal, Depends(ui_principal)]
) -> Principal:
    same_origin(request)
    return principal


ViewerDep = Annotated[Principal, Depends(ui_principal)]
ActorDep = Annotated[Principal, Depends(ui_action)]

"""Mnemo's exception hierarchy. One handler maps these to problem+json.

MnemoError
├── Unauthorized        401 — missing or invalid API key (when keys exist)
├── Forbidden           403 — the key's scope does not allow this
├── NotFound            404 — unknown (or another tenant's) session, user, event
├── Conflict            409 — session bound to another user
├── InvalidInput        422 — a field at fault, with its location
├── PayloadTooLarge     413 — body or batch beyond the documented limits
└── Unavailable         503 — the database is unreachable; retry later
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FieldError:
    loc: tuple[str | int, ...]
    msg: str
    type: str = "value_error"

    def as_dict(self) -> dict[str, Any]:
        return {
            "loc": list(self.loc),
            "field": ".".join(str(p) for p in self.loc),
            "msg": self.msg,
            "type": self.type,
        }


@dataclass
class MnemoError(Exception):
    detail: str
    errors: list[FieldError] = field(default_factory=list)

    status = 500
    title = "Internal error"
    slug = "internal"

    @property
    def public_detail(self) -> str:
        """What a 5xx may tell the client; ``detail`` (which may quote input) is logged."""
        return self.title.lower()

    def __str__(self) -> str:
        return self.detail


class Unauthorized(MnemoError):
    status = 401
    title = "Unauthorized"
    slug = "unauthorized"


class Forbidden(MnemoError):
    status = 403
    title = "Forbidden"
    slug = "forbidden"


class NotFound(MnemoError):
    status = 404
    title = "Not found"
    slug = "not-found"


class Conflict(MnemoError):
    status = 409
    title = "Conflict"
    slug = "conflict"


class InvalidInput(MnemoError):
    status = 422
    title = "Invalid input"
    slug = "validation"


class PayloadTooLarge(MnemoError):
    status = 413
    title = "Payload too large"
    slug = "too-large"


class Unavailable(MnemoError):
    status = 503
    title = "Service unavailable"
    slug = "unavailable"

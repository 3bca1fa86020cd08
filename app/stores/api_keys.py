"""API keys: ``mk_<id>_<secret>``; stored as (id, sha256 of the whole key).

The id half is public (shown by `mnemo keys list`, used to revoke); the secret
half exists only in the key handed to the operator once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

Scope = Literal["agent", "admin"]
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")
KEY_PATTERN = re.compile(r"^mk_([a-z0-9]{12})_([A-Za-z0-9_-]{20,})$")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant, with a scope, and the agent the key is bound to (if any)."""

    tenant_id: str
    scope: Scope
    key_id: str | None
    agent: str | None = None


@dataclass(frozen=True)
class KeyInfo:
    id: str
    tenant_id: str
    scope: str
    label: str | None
    created_at: datetime
    revoked_at: datetime | None
    agent: str | None = None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """(id, full key)."""
    key_id = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))
    return key_id, f"mk_{key_id}_{secrets.token_urlsafe(32)}"


INSERT_KEY = text("""
    INSERT INTO api_keys (id, tenant_id, scope, key_hash, label, agent)
    VALUES (:id, :tenant, :scope, :hash, :label, :agent)
""")

# key_by_id: an active key by its public id.
KEY_BY_ID = text("""
    SELECT id, tenant_id, scope, key_hash, agent
    FROM api_keys WHERE id = :id AND revoked_at IS NULL
""")

# keys_ever_created: auth is on for good once a key has existed. Revoking the last
# key must lock the API, never reopen it to anyone.
KEYS_EVER_CREATED = text("SELECT EXISTS (SELECT 1 FROM api_keys)")

REVOKE = text("""
    UPDATE api_keys SET revoked_at = now() WHERE id = :id AND revoked_at IS NULL RETURNING id
""")

# bootstrap_key: the operator's first key, only into a database that never had one;
# concurrent starts of several replicas insert it once.
BOOTSTRAP_KEY = text("""
    INSERT INTO api_keys (id, tenant_id, scope, key_hash, label)
    SELECT :id, :tenant, 'admin', :hash, 'bootstrap'
    WHERE NOT EXISTS (SELECT 1 FROM api_keys)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
""")

LIST_KEYS = text("""
    SELECT id, tenant_id, scope, label, created_at, revoked_at, agent
    FROM api_keys ORDER BY created_at
""")


async def create_key(
    conn: AsyncConnection,
    *,
    tenant: str,
    scope: Scope,
    label: str | None = None,
    agent: str | None = None,
) -> str:
    """A new key of ``tenant``; bound to ``agent`` it reaches only that agent's
    sessions and the tasks the agent is a member of (``app.core.permissions``)."""
    if not TENANT_PATTERN.match(tenant):
        raise ValueError("tenant: 1–128 characters of [A-Za-z0-9._:@-]")
    if agent is not None and not TENANT_PATTERN.match(agent):
        raise ValueError("agent: 1–128 characters of [A-Za-z0-9._:@-]")
    key_id, key = new_key()
    params = {"id": key_id, "tenant": tenant, "scope": scope, "hash": hash_key(key)}
    await conn.execute(INSERT_KEY, {**params, "label": label, "agent": agent})
    return key


async def bootstrap_key(conn: AsyncConnection, *, key: str, tenant: str) -> bool:
    """Install ``key`` as an admin key of ``tenant`` if no key ever existed; True if it did."""
    match = KEY_PATTERN.match(key)
    if match is None:
        raise ValueError("not a Mnemo key (mk_<12 of a-z0-9>_<20+ of A-Za-z0-9_->)")
    if not TENANT_PATTERN.match(tenant):
        raise ValueError("tenant: 1–128 characters of [A-Za-z0-9._:@-]")
    params = {"id": match.group(1), "tenant": tenant, "hash": hash_key(key)}
    return (await conn.execute(BOOTSTRAP_KEY, params)).first() is not None


async def authenticate(conn: AsyncConnection, key: str) -> Principal | None:
    match = KEY_PATTERN.match(key)
    if match is None:
        return None
    row = (await conn.execute(KEY_BY_ID, {"id": match.group(1)})).first()
    if row is None or not hmac.compare_digest(row.key_hash, hash_key(key)):
        return None
    return Principal(tenant_id=row.tenant_id, scope=row.scope, key_id=row.id, agent=row.agent)


async def keys_configured(conn: AsyncConnection) -> bool:
    """Whether the API requires keys: yes once any key was ever created."""
    return bool((await conn.execute(KEYS_EVER_CREATED)).scalar())


async def revoke_key(conn: AsyncConnection, *, key_id: str) -> bool:
    return (await conn.execute(REVOKE, {"id": key_id})).first() is not None


async def list_keys(conn: AsyncConnection) -> list[KeyInfo]:
    return [KeyInfo(**r._mapping) for r in await conn.execute(LIST_KEYS)]

"""Who is calling, from the Authorization header, with a short cache.

Once any active key exists, every route except health, metrics and docs needs
one. Lookups are cached for ``CACHE_TTL_S`` seconds per key, so a revoked key
stops working within that time (documented in docs/security.md). The clock is
injectable so tests can step past that window instead of sleeping through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.errors import Unauthorized
from app.stores.api_keys import Principal, authenticate, hash_key, keys_configured

CACHE_TTL_S = 5.0
CACHE_MAX = 10_000
DEFAULT_TENANT = "default"
OPEN = Principal(tenant_id=DEFAULT_TENANT, scope="admin", key_id=None)


@dataclass
class Guard:
    engine: AsyncEngine
    clock: Callable[[], float] = time.monotonic
    _mode: tuple[float, bool] | None = None
    _cache: dict[str, tuple[float, Principal | None]] = field(default_factory=dict)

    async def principal(self, key: str | None) -> Principal:
        """The caller of a request that presented ``key`` (the bearer token), if any."""
        now = self.clock()
        if not await self._keys_required(now):
            return OPEN
        if not key:
            raise Unauthorized("an API key is required: Authorization: Bearer <key>")
        digest = hash_key(key)
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < CACHE_TTL_S:
            found = cached[1]
        else:
            async with self.engine.connect() as conn:
                found = await authenticate(conn, key)
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()
            self._cache[digest] = (now, found)
        if found is None:
            raise Unauthorized("invalid or revoked API key")
        return found

    async def _keys_required(self, now: float) -> bool:
        if self._mode is None or now - self._mode[0] >= CACHE_TTL_S:
            async with self.engine.connect() as conn:
                self._mode = (now, await keys_configured(conn))
        return self._mode[1]

    def forget(self) -> None:
        """Drop cached decisions (tests, and after creating or revoking a key in-process)."""
        self._mode = None
        self._cache.clear()

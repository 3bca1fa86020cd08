"""JSON decoding on the hot paths: orjson, with the standard library as the fallback.

orjson is several times faster on the documents the context read and the memory rows
carry, but refuses integers past 64 bits, which a client's metadata may hold (stored
by Postgres as jsonb numerics): those few documents are decoded by ``json`` instead,
so the result is the same either way.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(document: str | bytes) -> Any:
    try:
        return orjson.loads(document)
    except orjson.JSONDecodeError:
        return json.loads(document)

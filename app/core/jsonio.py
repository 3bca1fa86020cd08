"""JSON decoding on the hot paths: orjson, with the standard library where they differ.

orjson is several times faster on the documents the context read and the memory rows
carry, but it reads an integer past 64 bits as a float (losing digits) and refuses
numbers past a double's range, both of which a client's metadata may hold (Postgres
keeps them exactly as jsonb numerics). A document with a run of 19 or more digits
(int64's largest has 19) is decoded by ``json`` instead, as is one orjson refuses, so
the result is the standard library's either way.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_LONG_NUMBER = re.compile(r"[0-9]{19}")


def loads(document: str | bytes) -> Any:
    if isinstance(document, bytes):
        document = document.decode()
    if _LONG_NUMBER.search(document) is not None:
        return json.loads(document)
    try:
        return orjson.loads(document)
    except orjson.JSONDecodeError:
        return json.loads(document)

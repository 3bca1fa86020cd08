"""JSON on the hot paths: orjson, with the standard library (decoding) or pydantic
(encoding) where they differ.

orjson is several times faster on the documents the context read and the memory rows
carry, but it reads an integer past 64 bits as a float (losing digits) and refuses
numbers past a double's range, both of which a client's metadata may hold (Postgres
keeps them exactly as jsonb numerics). A document with a run of 19 or more digits
(int64's largest has 19) is decoded by ``json`` instead, as is one orjson refuses, so
the result is the standard library's either way.

The run is found by mapping every digit to ``0`` (``bytes.translate``) and looking for
nineteen zeros: about 10 µs on a context read's 20 kB of turns, where the regular
expression ``[0-9]{19}`` took 200 µs, three times the cost of decoding the document.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import BaseModel

_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def loads(document: str | bytes) -> Any:
    if isinstance(document, str):
        document = document.encode()
    if _LONG_RUN in document.translate(_DIGITS_AS_ZERO):
        return json.loads(document)
    try:
        return orjson.loads(document)
    except orjson.JSONDecodeError:
        return json.loads(document)


def dumps_as(value: Any, model: Callable[[], BaseModel]) -> bytes:
    """``value``, the plain form of ``model()``, as the bytes pydantic writes for the
    model, by orjson in a fraction of the time: for str, int, float, bool, None, UTC
    times (``OPT_UTC_Z``) and lists and dicts of them, orjson writes what pydantic writes
    (the same order, escapes and number forms). An integer past 64 bits, which JSON
    allows and orjson refuses, is left to the model."""
    try:
        return orjson.dumps(value, option=orjson.OPT_UTC_Z)
    except orjson.JSONEncodeError:
        return model().model_dump_json().encode()

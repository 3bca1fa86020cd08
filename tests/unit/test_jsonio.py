"""The hot-path JSON decoder gives what the standard library gives, fast or not."""

from __future__ import annotations

import json

import pytest

from app.core import jsonio


@pytest.mark.parametrize(
    "document",
    [
        '{"a": [1, 2.5, null, true], "b": "\\u00e9t\\u00e9 \u590f"}',
        '{"n": 123456789012345678901234567890}',  # past 64 bits: orjson refuses it
        "[-98765432109876543210, 1e400]",
        '{"max": 9223372036854775807, "min": -9223372036854775808}',
        '{"u64": 18446744073709551615, "past": 18446744073709551616}',  # orjson: a float
        '["1234567890123456789012", 1000000000000000000.5e1]',  # long runs, not integers
        '{"pi": 3.14159265358979323846264338327950288}',
        "[]",
    ],
)
def test_loads_equals_the_standard_library(document: str) -> None:
    expected = json.loads(document)
    assert jsonio.loads(document) == expected
    assert jsonio.loads(document.encode()) == expected  # jsonb arrives as bytes


def test_invalid_json_still_raises() -> None:
    with pytest.raises(json.JSONDecodeError):
        jsonio.loads('{"a": ')

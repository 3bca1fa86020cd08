"""The driver's JSON codecs against real Postgres: a ``json`` value (the context read's
turns) reaches the decoder as the bytes Postgres sent, never as a str decoded only to
be encoded again, and both JSON types round-trip what the standard library reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.core import jsonio
from app.stores.engine import driver_connection, make_engine

DOCUMENT = {
    "text": 'été 夏 "quoted" \u2028 tab\t end',
    "big": 123456789012345678901234567890,
    "u64": 18446744073709551615,
    "nested": [1, 2.5, None, True, {"k": []}],
}


async def test_a_json_value_reaches_the_decoder_as_bytes(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[type] = []
    real = jsonio.loads

    def spy(document: str | bytes) -> Any:
        seen.append(type(document))
        return real(document)

    monkeypatch.setattr(jsonio, "loads", spy)  # codecs are set on each new connection
    engine = make_engine(db_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            db = await driver_connection(conn)  # as the context read reads
            sent = json.dumps(DOCUMENT, ensure_ascii=False)
            got = await db.fetchval("SELECT $1::text::json", sent)
            again = await db.fetchval("SELECT json_build_array($1::json)", DOCUMENT)
            stored = await db.fetchval("SELECT $1::jsonb", DOCUMENT)
    finally:
        await engine.dispose()
    assert got == json.loads(sent)
    assert again == [json.loads(sent)]
    assert stored == json.loads(sent)
    assert seen and set(seen) == {bytes}

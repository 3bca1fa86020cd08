"""The first request after a start does no more work than the next ones: FastAPI's
route building (dependency trees, validators) is done while the app starts."""

from __future__ import annotations

import httpx
import pydantic
import pytest

from tests.conftest import post_turns


def count_validators_built(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every pydantic TypeAdapter built from now on (FastAPI builds one per parameter
    and response of a route it sets up)."""
    built: list[object] = []
    init = pydantic.TypeAdapter.__init__

    def counted(self: pydantic.TypeAdapter[object], *args: object, **kwargs: object) -> None:
        built.append(args[0] if args else kwargs.get("type"))
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pydantic.TypeAdapter, "__init__", counted)
    return built


async def test_the_first_requests_after_a_start_build_no_route(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = count_validators_built(monkeypatch)
    assert (await post_turns(client, "s", [{"role": "user", "content": "hi"}])).status_code == 201
    assert (await client.get("/v1/sessions/s/context")).status_code == 200
    r = await client.get("/v1/users/u-1/memories", params={"query": "hi"})
    assert r.status_code == 200
    assert (await client.get("/v1/tasks/t")).status_code == 404
    assert built == []

"""The real service, as a user runs it: `mnemo serve` with the embedded database."""

from __future__ import annotations

import concurrent.futures
import http.client
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import start_server, wait_postgres_stopped

pytestmark = pytest.mark.e2e


def test_serve_embedded_post_context_and_survive_a_restart(data_dir: Path) -> None:
    server = start_server(data_dir)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            assert c.get("/healthz").json() == {"status": "ok"}
            r = c.post(
                "/v1/sessions/s-1/turns",
                json={
                    "user_id": "u-42",
                    "messages": [
                        {
                            "role": "user",
                            "content": "Never book red-eye flights.",
                            "id": "m-1",
                            "emphasized": True,
                        },
                        {"role": "assistant", "content": "Understood."},
                    ],
                },
            )
            assert r.status_code == 201
            ctx = c.get("/v1/sessions/s-1/context", params={"max_tokens": 500}).json()
            assert [m["content"] for m in ctx["messages"]] == [
                "Never book red-eye flights.",
                "Understood.",
            ]
            spec = c.get("/openapi.json").json()
            assert "/v1/sessions/{session_id}/context" in spec["paths"]
            assert c.get("/docs").status_code == 200
    finally:
        # serve stops its worker first (SIGTERM; SIGKILL 30 s later): an idle-class worker
        # on a busy machine gets the CPU to exit late, and a serve killed at the fixture's
        # 15 s would leave its Postgres running (by design).
        server.stop(wait_s=60)
    # Graceful: uvicorn finishes shutdown (worker stopped, pool closed), then re-raises
    # SIGTERM, and the embedded Postgres this server started is stopped with it (serve
    # waits 15 s for its shutdown checkpoint, which may end after serve has exited).
    assert "Application shutdown complete" in server.log.read_text()
    wait_postgres_stopped(data_dir)

    again = start_server(data_dir)
    try:
        turns = httpx.get(again.url + "/v1/sessions/s-1/turns").json()["turns"]
        assert turns[0]["id"] == "m-1" and len(turns) == 2
        _idle_connection_outlives_a_client_pool(again.url)
    finally:
        again.stop()


def _idle_connection_outlives_a_client_pool(url: str) -> None:
    """A keep-alive connection idle for longer than httpx's pool keeps one (5 s) is
    still open: the client gives it up first. At uvicorn's 5 s the two closed together,
    and a post sent at that moment failed with a read error."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b'{"status":"ok"}'
        time.sleep(5.5)
        conn.request("GET", "/healthz")  # the same socket: auto_open only if it was closed
        sock = conn.sock
        assert conn.getresponse().read() == b'{"status":"ok"}'
        assert conn.sock is sock
    finally:
        conn.close()


def test_killed_mid_batch_loses_no_accepted_turn_and_duplicates_none(data_dir: Path) -> None:
    """SIGKILL while 4 clients post; then retry every post with the same ids."""
    server = start_server(data_dir)
    batches = [
        [
            {"role": "user", "content": f"client {c} message {b}-{k}", "id": f"c{c}-{b}-{k}"}
            for k in range(5)
        ]
        for c in range(4)
        for b in range(40)
    ]
    accepted: dict[str, int] = {}

    def post_all(url: str, work: list[list[dict]]) -> None:
        with httpx.Client(base_url=url, timeout=5) as c:
            for batch in work:
                try:
                    r = c.post("/v1/sessions/crash/turns", json={"user_id": "u", "messages": batch})
                except httpx.HTTPError:
                    return  # the server died under us
                if r.status_code == 201:
                    for t in r.json()["turns"]:
                        accepted[t["id"]] = t["seq"]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(post_all, server.url, batches[i::4]) for i in range(4)]
        # Kill once some, but not all, posts were accepted.
        deadline = time.monotonic() + 60
        while len(accepted) < 100 and time.monotonic() < deadline:
            time.sleep(0.005)
        server.kill()
        for f in futures:
            f.result()
    assert 100 <= len(accepted) < 800

    again = start_server(data_dir)
    try:
        with httpx.Client(base_url=again.url, timeout=10) as c:
            before = c.get("/v1/sessions/crash/turns", params={"limit": 1000}).json()["turns"]
            stored = {t["id"]: t["seq"] for t in before}
            # Every accepted turn survived, with the seq it was acknowledged with.
            assert all(stored.get(i) == s for i, s in accepted.items())
            for batch in batches:
                r = c.post("/v1/sessions/crash/turns", json={"user_id": "u", "messages": batch})
                assert r.status_code == 201
                for t in r.json()["turns"]:
                    assert t["duplicate"] == (t["id"] in stored)
            after = c.get("/v1/sessions/crash/turns", params={"limit": 1000}).json()["turns"]
    finally:
        again.stop()
    assert len(after) == 800
    assert sorted(t["id"] for t in after) == sorted(m["id"] for b in batches for m in b)
    assert [t["seq"] for t in after] == list(range(1, 801))

"""Issue 16, findings 1-3, reproduced against a real `mnemo serve` (hash embedder,
loopback, the in-process worker sharing the event loop with the API).

Each hostile request must answer quickly, and another client polling /healthz all
along must never wait long. The issue's targets are 0.5 s per request and no stall
above 0.3 s; the bounds asserted here are looser (``REQUEST_S``, ``STALL_S``) so
that a shared 2-core machine running other suites cannot make them flake, yet
still well below what the old code took on the same inputs: 4.45 s for the form
with 38 underscores (×1.6 per extra one), 7.7 s for 10,000 digits, 5.2 s for the
newlines, 8.7 s for "mg " + digits, 2.3 s per /context with the pinned memories,
with /healthz stalled as long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.stores.embedded import stop_embedded
from tests.e2e.conftest import Server, start_server

pytestmark = pytest.mark.e2e

REQUEST_S = 2.0
STALL_S = 1.5
N = 10_000  # the size for the digit and newline reproductions


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("hostile")
    # The worker inside the API process (MNEMO_WORKER_PROCESS=false): the shape where a
    # slow compression could stall the API, and the one these findings were made on.
    running = start_server(
        data_dir, env={"MNEMO_EMBEDDER": "hash", "MNEMO_WORKER_PROCESS": "false"}
    )
    try:
        yield running
    finally:
        running.stop()
        stop_embedded(data_dir)


class HealthPoller:
    """Another client asking /healthz every 20 ms; the longest answer it waited for."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.longest = 0.0
        self.statuses: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as c:
            while not self._stop.is_set():
                started = time.perf_counter()
                self.statuses.add(c.get("/healthz").status_code)
                self.longest = max(self.longest, time.perf_counter() - started)
                time.sleep(0.02)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        time.sleep(0.1)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        time.sleep(0.1)  # the worker may still be busy after the last answer
        self._stop.set()
        self._thread.join(30)
        if exc_type is None:  # else the request's own failure is the one to report
            assert self.statuses == {200}
            assert self.longest < STALL_S, f"/healthz waited {self.longest:.2f} s"


def timed(c: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    started = time.perf_counter()
    response = c.request(method, path, **kwargs)
    elapsed = time.perf_counter() - started
    assert response.status_code < 500, response.text
    assert elapsed < REQUEST_S, f"{method} {path} took {elapsed:.2f} s"
    return response


def chat(c: httpx.Client, session: str, user: str, turns: int) -> None:
    """``turns`` plain turns, so the dynamic triggers look at the next batch (≥ 8)."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Step {i} of the plan."}
        for i in range(turns)
    ]
    r = c.post(f"/v1/sessions/{session}/turns", json={"user_id": user, "messages": messages})
    assert r.status_code == 201, r.text


def tool_batch(call_id: str, result: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def compact(c: httpx.Client, session: str) -> None:
    r = timed(c, "POST", f"/v1/sessions/{session}/compact", params={"wait": "true"})
    assert r.json()["status"] in ("compressed", "nothing_to_compress"), r.text


def underscore_form() -> str:
    """A 329-byte tool result: a form with a table and a line of 38 underscores."""
    form = (
        "APPLICATION FORM\n"
        "Please fill in the table below and return it to the front desk.\n"
        f"Full name: {'_' * 38}\n"
        "Date of birth (DD/MM/YYYY): __/__/____\n"
        "Signature: ________________  Date: __________\n"
        "Office use only - do not write in this table.\n"
    )
    form += "Reference: " + "x" * (329 - len(form.encode()) - len("Reference: ") - 1) + "\n"
    assert len(form.encode()) == 329
    return form


def test_finding_1_a_form_with_38_underscores_on_the_ingest_path(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        chat(c, "s-form", "u-form", 8)
        with HealthPoller(server.url):
            r = timed(
                c,
                "POST",
                "/v1/sessions/s-form/turns",
                json={"user_id": "u-form", "messages": tool_batch("call-form", underscore_form())},
            )
            assert r.status_code == 201, r.text
            compact(c, "s-form")


@pytest.mark.parametrize(
    ("case", "content"),
    [("digits", "1" * N), ("mg digits", "mg " + "1" * N)],
)
def test_finding_2_digit_runs_in_user_text(server: Server, case: str, content: str) -> None:
    session = f"s-{case.replace(' ', '-')}"
    with httpx.Client(base_url=server.url, timeout=60) as c:
        chat(c, session, "u-digits", 8)
        with HealthPoller(server.url):
            message = {"role": "user", "content": content}
            timed(
                c,
                "POST",
                f"/v1/sessions/{session}/turns",
                json={"user_id": "u-digits", "messages": [message]},
            )
            chat(c, session, "u-digits", 4)  # the digits leave the working window
            compact(c, session)


def test_finding_2_a_tool_text_of_newlines(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        chat(c, "s-newlines", "u-newlines", 8)
        with HealthPoller(server.url):
            timed(
                c,
                "POST",
                "/v1/sessions/s-newlines/turns",
                json={
                    "user_id": "u-newlines",
                    "messages": tool_batch("call-nl", "x" + "\n" * N + "x"),
                },
            )
            chat(c, "s-newlines", "u-newlines", 4)
            compact(c, "s-newlines")


def test_finding_3_context_with_twenty_long_pinned_memories(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for i in range(20):
            letters = chr(ord("a") + i) * 4000  # 20 distinct texts: none is deduplicated
            r = c.post(
                "/v1/users/u-pinned/memories",
                json={"text": letters, "kind": "high_stakes", "pinned": True},
            )
            assert r.status_code == 201, r.text
        chat(c, "s-pinned", "u-pinned", 2)
        with HealthPoller(server.url):
            for _ in range(3):
                ctx = timed(c, "GET", "/v1/sessions/s-pinned/context", params={"max_tokens": 4000})
                assert ctx.status_code == 200, ctx.text

"""A real `mnemo serve` with seeded data, and headless Chromium (Debian's chromium and
chromedriver; `.ci/run` installs them) driving it through selenium."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from app.stores.embedded import stop_embedded
from tests.e2e.conftest import Server, create_key, start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
WIDE = (1280, 800)
NARROW = (390, 844)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs chromium and chromedriver (apt-get install chromium chromium-driver)",
)


@dataclass
class Site:
    server: Server
    admin: str
    other: str  # admin of another tenant
    agent: str
    dead_job: int
    data_dir: Path


def trip_turns() -> list[dict[str, object]]:
    """A short support session: a booking through a tool, a constraint, a change of mind."""
    call = {
        "id": "call_hotel_1",
        "type": "function",
        "function": {
            "name": "book_hotel",
            "arguments": '{"city": "Lisbon", "nights": 3, "room": "double"}',
        },
    }
    return [
        {"role": "user", "content": "I need a hotel in Lisbon for three nights, a double room."},
        {
            "role": "user",
            "content": "Never pick anything above the fourth floor.",
            "emphasized": True,
        },
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": "call_hotel_1",
            "content": '{"status": "confirmed", "booking_id": "HX-7731"}',
        },
        {"role": "assistant", "content": "Booked, confirmation HX-7731."},
        {"role": "user", "content": "Actually make the budget 180 euros per night instead of 150."},
        {"role": "assistant", "content": "Noted: 180 euros per night."},
        {"role": "user", "content": "我的护照号码是 E12345678，请记下来。"},
        {"role": "assistant", "content": "好的，我记下了。"},
        {"role": "user", "content": "Shall we also book the airport transfer?"},
        {"role": "assistant", "content": "Do you want the transfer on arrival day?"},
        {"role": "user", "content": "Yes please."},
    ]


async def _dead_job(data_dir: Path) -> int:
    """A job of a kind no worker handles: the worker buries it (a real dead job)."""
    conn = await asyncpg.connect(
        host=str((data_dir / "pg").resolve()), user="postgres", database="mnemo"
    )
    try:
        job_id = await conn.fetchval(
            """INSERT INTO jobs (tenant_id, kind, max_attempts, payload)
               VALUES ('ops', 'legacy_reindex', 1, '{}') RETURNING id"""
        )
        for _ in range(200):
            if await conn.fetchval("SELECT status FROM jobs WHERE id = $1", job_id) == "dead":
                return int(job_id)
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    raise RuntimeError("the worker did not bury the job")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    data_dir = tmp_path_factory.mktemp("browser")
    admin = create_key(data_dir, tenant="ops", scope="admin")
    other = create_key(data_dir, tenant="elsewhere", scope="admin")
    agent = create_key(data_dir, tenant="ops", scope="agent")
    server = start_server(data_dir, env={"MNEMO_EMBEDDER": "hash", "MNEMO_INDEX_DELAY_S": "0"})
    try:
        auth = {"Authorization": f"Bearer {admin}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=60) as http:
            r = http.post(
                "/v1/sessions/trip-1/turns",
                json={"user_id": "traveller-7", "messages": trip_turns()},
            )
            r.raise_for_status()
            for text, kind in (
                ("Allergic to peanuts.", "high_stakes"),
                ("Prefers aisle seats on long flights.", "preference"),
                ("喜欢安静的房间。", "preference"),
            ):
                http.post(
                    "/v1/users/traveller-7/memories", json={"text": text, "kind": kind}
                ).raise_for_status()
            r = http.post("/v1/sessions/trip-1/compact", params={"wait": "true"})
            assert r.status_code == 200 and r.json()["status"] == "compressed", r.text
        yield Site(server, admin, other, agent, asyncio.run(_dead_job(data_dir)), data_dir)
    finally:
        server.stop()
        stop_embedded(data_dir)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WIDE[0]},{WIDE[1]}",
        "--lang=en-US",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER or ""), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot_dir() -> Path | None:
    """Where screenshots go when MNEMO_SCREENSHOTS names a folder (docs/img/inspector)."""
    folder = os.environ.get("MNEMO_SCREENSHOTS")
    return Path(folder) if folder else None

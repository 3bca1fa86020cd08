"""Real Postgres for every test: an embedded server per test run, a template
database migrated once, and a fresh clone of it per test (CREATE DATABASE … TEMPLATE)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core.config import Settings
from app.stores.embedded import throwaway_embedded
from app.stores.engine import make_engine
from app.stores.migrate import upgrade_to_head
from app.wiring import create_app

TEMPLATE = "mnemo_template"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--explore",
        action="store_true",
        help="also run the random exploration tests (marker `explore`; new inputs every run)",
    )
    parser.addoption("--explore-examples", default="200", help="examples per operation")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Exploration is not a gate: its inputs change every run. Deselected unless asked for."""
    if config.getoption("--explore"):
        return
    keep = [item for item in items if item.get_closest_marker("explore") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


def _dsn(url: str, database: str) -> str:
    """asyncpg DSN for ``database`` on the server of a SQLAlchemy URL."""
    from sqlalchemy.engine import make_url

    return (
        make_url(url)
        .set(drivername="postgresql", database=database)
        .render_as_string(hide_password=False)
    )


def _with_database(url: str, database: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=database).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """The embedded server, started once per run; URL of its `mnemo` database.

    Its folder is our own, not pytest's numbered tmp dirs, which a concurrent pytest
    run may prune while this one still uses them.
    """
    with throwaway_embedded("mnemo-test-pg-") as url:
        yield url


@pytest.fixture(scope="session")
async def template_url(pg_url: str) -> str:
    admin = await asyncpg.connect(_dsn(pg_url, "postgres"))
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
        await admin.execute(f"CREATE DATABASE {TEMPLATE}")
    finally:
        await admin.close()
    url = _with_database(pg_url, TEMPLATE)
    engine = make_engine(url, pool_size=1)
    await upgrade_to_head(engine)
    await engine.dispose()
    return url


@pytest.fixture
async def db_url(pg_url: str, template_url: str) -> AsyncIterator[str]:
    name = "t_" + uuid.uuid4().hex[:16]
    admin = await asyncpg.connect(_dsn(pg_url, "postgres"))
    try:
        await admin.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    finally:
        await admin.close()
    yield _with_database(pg_url, name)
    admin = await asyncpg.connect(_dsn(pg_url, "postgres"))
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(db_url, pool_size=5)
    yield eng
    await eng.dispose()


@pytest.fixture
def settings(db_url: str) -> Settings:
    return make_settings(db_url)


def make_settings(db_url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "database_url": db_url,
        "embedded_worker": False,
        "job_poll_interval_s": 0.05,
        "job_batch_wait_s": 0.0,  # embedding batches take what waits, at once
        "job_backoff_base_s": 0.05,
        # A deterministic, instant embedder; tests of retrieval quality ask for "use".
        "embedder": "hash",
        "index_delay_s": 0.0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
async def client(settings: Settings, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    """The app in-process over ASGI, lifespan included, on the test's database."""
    app = create_app(settings, database_url=settings.async_database_url or "", engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mnemo") as c:
            yield c


async def post_turns(
    client: httpx.AsyncClient, session: str, messages: list[dict], user: str = "u-1"
) -> httpx.Response:
    return await client.post(
        f"/v1/sessions/{session}/turns", json={"user_id": user, "messages": messages}
    )


async def gather(*aws):  # type: ignore[no-untyped-def]
    return await asyncio.gather(*aws)

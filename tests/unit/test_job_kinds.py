"""Job kinds: one enum, a priority per kind, and a declared handler for every kind."""

from __future__ import annotations

import pytest

from app.core.config import Settings
from app.core.jobs import JobKind
from app.providers.embed import HashEmbedder
from app.services.jobs import JobContext, job
from app.wiring import build_handlers


def test_compression_is_claimed_before_background_work() -> None:
    background = [k for k in JobKind if k not in (JobKind.COMPRESS, JobKind.READ_UNITS)]
    assert all(JobKind.COMPRESS.priority > k.priority for k in background)


def test_a_bulk_posts_units_are_read_before_anything_else() -> None:
    # A few ms a session; until then every API process reads the turns on a context read.
    others = [k for k in JobKind if k is not JobKind.READ_UNITS]
    assert all(JobKind.READ_UNITS.priority > k.priority for k in others)


def test_every_kind_has_a_handler_when_long_term_memory_is_on() -> None:
    settings = Settings(_env_file=None, embedder="hash")  # type: ignore[call-arg]
    handlers = build_handlers(settings, embedder=HashEmbedder(64))
    assert set(handlers) == set(JobKind)


def test_without_an_embedder_only_the_memory_jobs_have_no_handler() -> None:
    handlers = build_handlers(Settings(_env_file=None, embedder="none"))  # type: ignore[call-arg]
    assert set(JobKind) - set(handlers) == {
        JobKind.EMBED_MEMORIES,
        JobKind.INDEX_SESSION,
        JobKind.PROMOTE,
    }


async def test_a_declared_handler_gets_the_deps_it_was_bound_to() -> None:
    seen: list[tuple[object, str]] = []

    @job(JobKind.RECOUNT_TOKENS)
    async def handler(ctx: JobContext, deps: str) -> None:
        seen.append((ctx, deps))

    assert handler.kind is JobKind.RECOUNT_TOKENS
    assert handler.priority == JobKind.RECOUNT_TOKENS.priority
    ctx = object()
    await handler.bind("the deps")(ctx)  # type: ignore[arg-type]
    assert seen == [(ctx, "the deps")]


@pytest.mark.parametrize("kind", list(JobKind))
def test_a_kind_is_stored_as_its_plain_name(kind: JobKind) -> None:
    assert kind == kind.value and kind.value.islower()

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.core.config import Settings, is_loopback, to_asyncpg_url


def settings(**kw: object) -> Settings:
    return Settings(_env_file=None, **kw)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:p@db:5432/mnemo", "postgresql+asyncpg://u:p@db:5432/mnemo"),
        ("postgres://u@db/m", "postgresql+asyncpg://u@db/m"),
        ("postgresql+asyncpg://u@db/m", "postgresql+asyncpg://u@db/m"),
    ],
)
def test_database_urls_are_pinned_to_asyncpg(url: str, expected: str) -> None:
    assert to_asyncpg_url(url) == expected


def test_non_postgres_url_is_refused() -> None:
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        to_asyncpg_url("mysql://x")


def test_history_budget_is_window_minus_the_fixed_parts() -> None:
    s = settings(
        model_window_tokens=8192,
        system_prompt_tokens=1000,
        tool_schema_tokens=500,
        reserved_output_tokens=1000,
    )
    assert s.history_budget_tokens == 5692


def test_a_window_too_small_for_its_fixed_parts_is_refused() -> None:
    with pytest.raises(ValidationError, match="model_window_tokens"):
        settings(model_window_tokens=2000, reserved_output_tokens=1500, system_prompt_tokens=600)


def test_env_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMO_CONTEXT_MAX_TOKENS", "777")
    assert settings().context_max_tokens == 777


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback

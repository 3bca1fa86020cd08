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


def test_secrets_stay_out_of_the_settings_repr() -> None:
    s = settings(
        database_url="postgresql://mnemo:db-pass-1@db/mnemo",
        llm_api_key="llm-key-2",
        embedding_api_key="emb-key-3",
        bootstrap_key="mk_boot-4",
    )
    shown = repr(s) + str(s.model_dump())
    for secret in ("db-pass-1", "llm-key-2", "emb-key-3", "mk_boot-4"):
        assert secret not in shown
    assert s.async_database_url == "postgresql+asyncpg://mnemo:db-pass-1@db/mnemo"


def test_an_empty_database_url_means_the_embedded_database() -> None:
    assert settings(database_url="").async_database_url is None


def test_log_level_is_one_of_the_known_levels_in_any_case() -> None:
    assert settings(log_level="debug").log_level == "DEBUG"
    with pytest.raises(ValidationError, match="log_level"):
        settings(log_level="verbose")


def test_an_unknown_embedder_is_refused_when_the_settings_are_read() -> None:
    with pytest.raises(ValidationError, match="embedder"):
        settings(embedder="word2vec")

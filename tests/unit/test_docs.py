"""Every setting is documented where operators look: the README and .env.example."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc", ["README.md", ".env.example"])
def test_every_setting_is_documented(doc: str) -> None:
    text = (ROOT / doc).read_text()
    missing = [name for name in Settings.model_fields if f"MNEMO_{name.upper()}" not in text]
    assert missing == []

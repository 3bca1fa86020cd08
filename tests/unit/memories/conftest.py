from __future__ import annotations

import pytest

from app.providers.embed import USEEmbedder


@pytest.fixture(scope="session")
def use_embedder() -> USEEmbedder:
    """One loaded USE model for the whole run (loading takes ~1–2 s)."""
    embedder = USEEmbedder()
    embedder.embed_sync(["warm up"])
    return embedder

"""Unit-vector arithmetic shared by the embedders and the pure ranking code."""

from __future__ import annotations

import math
from collections.abc import Sequence


def l2_normalize(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to unit length; the zero vector stays zero."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else [0.0] * len(vector)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine of two L2-normalised vectors (their dot product)."""
    return math.fsum(x * y for x, y in zip(a, b, strict=True))

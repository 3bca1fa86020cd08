"""Mnemo's episode retrieval replayed in-process, to measure changes before making them.

    python -m bench.datasets.offline --dataset locomo [--data PATH] [--limit N]
        [--variants default,max300,names,...] --out FILE.json

The replica follows ``app/memories``: episodes are ``chunk_turns`` of each
session (as ``index_session`` cuts a session posted in one batch), embedded
with ``USEEmbedder``, with ``lexical_terms``; a query ranks them by exact cosine
(top ``CANDIDATES_PER_LIST``) and by the count of shared ``query_terms`` (ties:
newest first), fused by RRF (k = 60), as ``hybrid_search`` does. Each variant
changes one thing; the figures are the same as the HTTP benchmark's. The
``default`` variant is checked against the service's own run (docs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.memories.chunk import ChunkTurn, chunk_turns
from app.memories.fuse import rrf
from app.memories.lexical import idf, lexical_terms, overlap_score, query_terms
from app.services.memories import CANDIDATES_PER_LIST
from bench.datasets import locomo, longmemeval
from bench.datasets.baselines import BM25
from bench.datasets.model import Dataset, User
from bench.datasets.progress import Progress
from bench.datasets.scoring import Hit, by_category, question_scores

KS = (1, 5, 10)


@dataclass(frozen=True)
class Variant:
    name: str
    min_chars: int = 200
    max_chars: int = 500
    overlap: float = 0.15
    speaker_names: bool = False  # episode lines "Caroline: …" instead of "user: …"
    date_prefix: bool = False  # "[8 May 2023]" line at the top of each episode
    # overlap: shared-term count (as the service) | idf: app.memories.lexical.overlap_score
    # with the user's episode idf | bm25: Okapi BM25 over the episode text | none
    lexical: str = "overlap"
    vector: bool = True
    candidates: int = CANDIDATES_PER_LIST  # as the service
    lexical_weight: float = 1.0  # RRF weight of the lexical list (vector: 1)
    per_session_cap: int | None = None  # at most this many results from one session
    turn_docs: bool = False  # also index each raw turn as its own memory


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("default"),
        Variant("max300", min_chars=120, max_chars=300),
        Variant("max800", min_chars=300, max_chars=800),
        Variant("names", speaker_names=True),
        Variant("date", date_prefix=True),
        Variant("names+date", speaker_names=True, date_prefix=True),
        Variant("bm25", lexical="bm25"),
        Variant("names+bm25", speaker_names=True, lexical="bm25"),
        Variant("lexical-only", vector=False),
        Variant("vector-only", lexical="none"),
        Variant("lex2x", lexical_weight=2.0),
        Variant("cand50", candidates=50),
        Variant("cap2", per_session_cap=2),
        Variant("names+bm25+cap2", speaker_names=True, lexical="bm25", per_session_cap=2),
        Variant("turns+episodes", turn_docs=True),
        Variant("names+bm25+turns", speaker_names=True, lexical="bm25", turn_docs=True),
        Variant("idf", lexical="idf"),
        Variant("names+idf", speaker_names=True, lexical="idf"),
        Variant(
            "names+bm25+max800", speaker_names=True, lexical="bm25", min_chars=300, max_chars=800
        ),
    )
}


@dataclass(frozen=True)
class Doc:
    text: str  # what is embedded and term-matched
    hit: Hit


class EmbeddingCache:
    """USE vectors by text, so variants that share texts embed them once."""

    def __init__(self) -> None:
        from app.providers.embed import USEEmbedder

        self._embedder = USEEmbedder()
        self._vectors: dict[str, np.ndarray] = {}

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            progress = Progress(len(missing), "texts embedded")
            for start in range(0, len(missing), 256):
                batch = missing[start : start + 256]
                for text, vector in zip(batch, self._embedder.embed_sync(batch), strict=True):
                    self._vectors[text] = np.asarray(vector, dtype=np.float32)
                progress.advance(len(batch))
            progress.close()
        if not texts:
            return np.zeros((0, 512), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


def documents(user: User, variant: Variant) -> list[Doc]:
    docs: list[Doc] = []
    for session in user.sessions:
        turns = [
            ChunkTurn(
                seq=i,
                role=(t.name or t.role) if variant.speaker_names else t.role,
                content=t.content,
                metadata={"dataset_id": t.dataset_id},
            )
            for i, t in enumerate(session.turns, start=1)
        ]
        chunks = chunk_turns(
            turns,
            min_chars=variant.min_chars,
            max_chars=variant.max_chars,
            overlap=variant.overlap,
        )
        header = f"[{session.date[:10]}]\n" if variant.date_prefix else ""
        for chunk in chunks:
            hit = Hit(tuple(chunk.dataset_ids), (session.session_id,), chunk.text)
            docs.append(Doc(header + chunk.text, hit))
        if variant.turn_docs:
            for t in session.turns:
                if t.content:
                    line = f"{(t.name or t.role) if variant.speaker_names else t.role}: {t.content}"
                    docs.append(
                        Doc(header + line, Hit((t.dataset_id,), (session.session_id,), line))
                    )
    return docs


@dataclass
class UserIndex:
    docs: list[Doc]
    vectors: np.ndarray
    terms: list[set[str]]
    bm25: BM25 | None
    idf: dict[str, float]


def build(user: User, variant: Variant, cache: EmbeddingCache) -> UserIndex:
    docs = documents(user, variant)
    texts = [d.text for d in docs]
    vectors = cache.matrix(texts) if variant.vector else np.zeros((len(docs), 512), np.float32)
    terms = [set(lexical_terms(t)) for t in texts]
    freq = Counter(term for t in terms for term in t)
    return UserIndex(
        docs,
        vectors,
        terms,
        BM25(texts) if variant.lexical == "bm25" else None,
        idf(freq, len(docs)),
    )


def rank(index: UserIndex, question: str, qvec: np.ndarray, variant: Variant, k: int) -> list[Hit]:
    n = variant.candidates
    rankings: list[list[str]] = []
    weights: list[float] = []
    if variant.vector and len(index.docs):
        sims = index.vectors @ qvec
        order = sorted(range(len(sims)), key=lambda i: -float(sims[i]))[:n]
        rankings.append([str(i) for i in order])
        weights.append(1.0)
    if variant.lexical == "overlap":
        qterms = set(query_terms(question))
        shared = [(len(t & qterms), i) for i, t in enumerate(index.terms)]
        # The service breaks ties by last_confirmed_at DESC: the newest episode first.
        order = [i for s, i in sorted(shared, key=lambda p: (-p[0], -p[1])) if s > 0][:n]
        rankings.append([str(i) for i in order])
        weights.append(variant.lexical_weight)
    elif variant.lexical == "idf":
        qterms_list = query_terms(question)
        scored = [(overlap_score(qterms_list, t, index.idf), i) for i, t in enumerate(index.terms)]
        order = [i for s, i in sorted(scored, key=lambda p: (-p[0], -p[1])) if s > 0][:n]
        rankings.append([str(i) for i in order])
        weights.append(variant.lexical_weight)
    elif variant.lexical == "bm25" and index.bm25 is not None:
        rankings.append([str(i) for i in index.bm25.top(question, n)])
        weights.append(variant.lexical_weight)
    fused = weighted_rrf(rankings, weights)
    picked: list[int] = []
    if variant.per_session_cap is None:
        picked = [int(i) for i, _ in fused[:k]]
    else:
        per: dict[tuple[str, ...], int] = {}
        rest: list[int] = []
        for item, _ in fused:
            i = int(item)
            sessions = index.docs[i].hit.session_ids
            if per.get(sessions, 0) < variant.per_session_cap:
                per[sessions] = per.get(sessions, 0) + 1
                picked.append(i)
            else:
                rest.append(i)
            if len(picked) == k:
                break
        picked += rest[: k - len(picked)]
    return [index.docs[i].hit for i in picked]


def weighted_rrf(
    rankings: Sequence[Sequence[str]], weights: Sequence[float]
) -> list[tuple[str, float]]:
    if all(w == 1.0 for w in weights):
        return rrf(rankings)
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for r, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (60 + r)
    return sorted(scores.items(), key=lambda p: -p[1])


def evaluate(
    dataset: Dataset, variant: Variant, cache: EmbeddingCache, qvecs: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    began = time.perf_counter()
    indexes = {u.user_id: build(u, variant, cache) for u in dataset.users}
    rows = []
    for q in dataset.questions:
        if not q.scored:
            continue
        hits = rank(indexes[q.user_id], q.question, qvecs[q.question_id], variant, max(KS))
        rows.append({"category": q.category, **question_scores(q, hits, KS)})
    groups = {"1,2,4": ("1", "2", "4")} if dataset.name == "locomo" else {}
    metrics = [f"session_r@{k}" for k in KS] + [f"turn_r@{k}" for k in KS]
    episodes = [d for ix in indexes.values() for d in ix.docs]
    return {
        "variant": asdict(variant),
        "documents": len(episodes),
        "mean_chars": round(sum(len(d.hit.text) for d in episodes) / max(1, len(episodes)), 1),
        "summary": by_category(rows, metrics, groups=groups),
        "seconds": round(time.perf_counter() - began, 1),
    }


def load(name: str, path: Path | None, limit: int | None) -> Dataset:
    if name == "locomo":
        return locomo.load(
            path or Path("/work/shared/data/locomo/locomo_dev.json"), limit_conversations=limit
        )
    return longmemeval.load(
        path or Path("/work/shared/data/longmemeval/longmemeval_s_dev.json"), limit=limit
    )


def print_table(dataset: Dataset, results: Sequence[Mapping[str, Any]]) -> None:
    cats = list(results[0]["summary"].keys())
    for metric in ("session_r@5", "turn_r@10"):
        print(f"\n{dataset.name}: {metric} by variant")
        head = f"{'variant':<20}{'chars':>7}" + "".join(f"{c[:10]:>11}" for c in cats)
        print(head)
        print("-" * len(head))
        for r in results:
            cells = "".join(f"{r['summary'][c][metric] or 0:>11.3f}" for c in cats)
            print(f"{r['variant']['name']:<20}{r['mean_chars']:>7.0f}{cells}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.datasets.offline", description=__doc__)
    parser.add_argument("--dataset", choices=("locomo", "longmemeval"), default="locomo")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    dataset = load(args.dataset, args.data, args.limit)
    cache = EmbeddingCache()
    scored = [q for q in dataset.questions if q.scored]
    qvecs = dict(
        zip(
            [q.question_id for q in scored], cache.matrix([q.question for q in scored]), strict=True
        )
    )
    results = []
    for name in args.variants.split(","):
        result = evaluate(dataset, VARIANTS[name], cache, qvecs)
        print(f"{name}: {result['documents']} docs, {result['seconds']} s", file=sys.stderr)
        results.append(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"dataset": dataset.name, "results": results}, indent=1) + "\n")
    print_table(dataset, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

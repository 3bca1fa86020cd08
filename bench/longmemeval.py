"""LongMemEval long-term memory retrieval, against the real service.

    python -m bench.longmemeval --data PATH --out FILE.json [--limit N] [--k 1,5,10]
                                [--database-url URL | --url URL]
                                [--plot FILE.png --plot-tokens FILE.png]

Each question's haystack becomes its own Mnemo user, each haystack session a
Mnemo session whose id is renamed (``answer_…`` ids would leak the label), the
turns posted with their times and ``S<i>:<j>`` turn ids; ``has_answer`` is never
sent (``bench/datasets/longmemeval.py``). Then each question is asked of
``GET /memories?kind=episode`` and ``GET /context`` (probe session, budget
2,500), and of BM25 and dense retrieval over the raw turns. Figures per
question type: evidence session and turn recall@k, answer string in the
context, context tokens. Abstention questions are not scored.
Definitions and results: docs/benchmarks-datasets.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.datasets import longmemeval
from bench.datasets.model import Dataset
from bench.datasets.runner import Spec
from bench.datasets.runner import main as run_main

DEFAULT_DATA = Path("/work/shared/data/longmemeval/longmemeval_s_dev.json")


def _load(path: Path, args: Any) -> Dataset:
    return longmemeval.load(path, limit=args.limit)


def _extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")


SPEC = Spec(
    prog="python -m bench.longmemeval",
    title="LongMemEval retrieval",
    default_data=DEFAULT_DATA,
    load=_load,
    groups={},
    targets=(
        ("session_r@5", "all", "≥", 0.90),
        ("context_tokens_median", "all", "≤", 2500),
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(SPEC, argv, _extra)


if __name__ == "__main__":
    raise SystemExit(main())

"""LongMemEval long-term memory retrieval, against the real service.

    python -m bench.longmemeval --out FILE.json [--data PATH] [--split dev|heldout|all]
                                [--budgets 500,1000,2500] [--limit N]
                                [--database-url URL | --url URL] [--plot PNG --plot-episodes PNG]

Each question's haystack becomes its own Mnemo user, each haystack session a
Mnemo session whose id is renamed (``answer_…`` ids would leak the label), the
turns posted with their times and ``S<i>:<j>`` turn ids; ``has_answer`` is never
sent (``bench/datasets/longmemeval.py``). Then each question is asked of
``GET /context?query=…&max_tokens=B`` (probe session) at each budget B, and of
BM25 and dense retrieval over the raw turns packed to B tokens; secondary,
``GET /memories?kind=episode``. Figures per question type: evidence turns
present in the context, tokens, answer string. Abstention questions are not
scored. Split ``dev`` leaves every fourth question aside (``heldout``).
Definitions and results: docs/benchmarks.md.
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
    return longmemeval.load(path, limit=args.limit, split=args.split)


def _extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")


SPEC = Spec(
    prog="python -m bench.longmemeval",
    title="LongMemEval retrieval",
    default_data=DEFAULT_DATA,
    load=_load,
    groups={},
    main_group="all",
    targets=(
        ("ev@2500", "all", "≥", 0.92),
        ("context_ms_p50_new_query_warm", "all", "≤", 10.0),
    ),
    heldout_note=f"every {longmemeval.HELDOUT_EVERY}th question",
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(SPEC, argv, _extra)


if __name__ == "__main__":
    raise SystemExit(main())

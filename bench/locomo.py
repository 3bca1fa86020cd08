"""LoCoMo long-term memory retrieval, against the real service.

    python -m bench.locomo --data PATH --out FILE.json [--limit-conversations N]
                           [--k 1,5,10] [--database-url URL | --url URL]
                           [--plot FILE.png --plot-tokens FILE.png]

Each conversation becomes a Mnemo user, each of its sessions a Mnemo session,
posted turn by turn over HTTP with the original times and dataset turn ids
(``bench/datasets/locomo.py``). When the worker has indexed everything, each
question is asked of ``GET /v1/users/{user}/memories?kind=episode`` and of
``GET /context`` (a probe session, budget 2,500), and, in-process, of BM25 and
dense retrieval over the same raw turns. Figures per QA category: evidence
session and turn recall@k, answer string in the context, context tokens.
Definitions and results: docs/benchmarks-datasets.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.datasets import locomo
from bench.datasets.model import Dataset
from bench.datasets.runner import Spec
from bench.datasets.runner import main as run_main

DEFAULT_DATA = Path("/work/shared/data/locomo/locomo_dev.json")


def _load(path: Path, args: Any) -> Dataset:
    return locomo.load(path, limit_conversations=args.limit_conversations)


def _extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit-conversations", type=int, default=None, help="only the first N conversations"
    )


SPEC = Spec(
    prog="python -m bench.locomo",
    title="LoCoMo retrieval",
    default_data=DEFAULT_DATA,
    load=_load,
    groups={"1,2,4": ("1", "2", "4")},
    targets=(
        ("session_r@5", "1,2,4", "≥", 0.90),
        ("turn_r@10", "1,2,4", "≥", 0.80),
        ("context_tokens_median", "all", "≤", 2500),
        ("runtime_s", "all", "≤", 600),
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(SPEC, argv, _extra)


if __name__ == "__main__":
    raise SystemExit(main())

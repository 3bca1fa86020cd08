"""LoCoMo long-term memory retrieval, against the real service.

    python -m bench.locomo --out FILE.json [--data PATH] [--split dev|heldout|all]
                           [--budgets 500,1000,2500] [--limit-conversations N]
                           [--database-url URL | --url URL] [--plot PNG --plot-episodes PNG]

Each conversation becomes a Mnemo user, each of its sessions a Mnemo session,
posted turn by turn over HTTP with the original times and dataset turn ids
(``bench/datasets/locomo.py``). When the worker has indexed everything, each
question is asked of ``GET /context?query=…&max_tokens=B`` of a fresh probe
session at each budget B, and, in-process, of BM25 and dense retrieval over the
same raw turns packed to B tokens. Figures per QA category: evidence turns
present in the context, tokens used, answer string in the context; secondary,
``GET /memories?kind=episode`` recall@k. Split ``dev`` leaves conversation
conv-43 aside (``heldout``). Definitions and results: docs/benchmarks.md.
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
    return locomo.load(path, limit_conversations=args.limit_conversations, split=args.split)


def _extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit-conversations", type=int, default=None, help="only the first N conversations"
    )


SPEC = Spec(
    prog="python -m bench.locomo",
    title="LoCoMo retrieval",
    default_data=DEFAULT_DATA,
    load=_load,
    groups={"1-4": ("1", "2", "3", "4")},
    main_group="1-4",
    targets=(
        ("ev@2500", "1-4", "≥", 0.85),
        ("context_ms_p50_new_query_warm", "all", "≤", 10.0),
    ),
    heldout_note="conversation " + ", ".join(locomo.HELDOUT),
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(SPEC, argv, _extra)


if __name__ == "__main__":
    raise SystemExit(main())

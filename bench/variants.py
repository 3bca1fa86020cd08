"""Our own held-out phrasing variants, scored against the rule families.

    python -m bench.variants [--file bench/heldout/variants.json]

The variants were written before the deferral and change-of-mind rules were
tuned and were never used to tune them: a check that the rules carry over to
phrasing they were not written for. Prints the share right per kind.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from app.compression.extract.changes import reversal, value_change
from app.compression.extract.deferral import is_deferral
from app.compression.text import normalize

DEFAULT = Path(__file__).parent / "heldout" / "variants.json"


def right(item: dict[str, str]) -> bool:
    text, kind = item["text"], item["kind"]
    deferred = is_deferral(text)
    change = value_change(text) or reversal(text)
    if kind == "deferral":
        return deferred
    if kind == "none":
        return not deferred and change is None
    if change is None:
        return False
    return normalize(change.new) == normalize(item["new"]) and normalize(item["old"]) in normalize(
        change.old
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.variants", description=__doc__)
    parser.add_argument("--file", type=Path, default=DEFAULT)
    args = parser.parse_args(argv)
    items = json.loads(args.file.read_text(encoding="utf-8"))["items"]
    total: Counter[str] = Counter()
    ok: Counter[str] = Counter()
    for item in items:
        total[item["kind"]] += 1
        if right(item):
            ok[item["kind"]] += 1
        else:
            print(f"  wrong {item['kind']}: {item['text']}")
    for kind in total:
        print(f"{kind:<10} {ok[kind]}/{total[kind]}")
    print(f"all        {sum(ok.values())}/{sum(total.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

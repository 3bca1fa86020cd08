"""Where a benchmark writes its result: one JSON file, named on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_result(out: Path | None, result: Mapping[str, Any]) -> None:
    """``result`` as indented JSON in ``out`` (its folder made first); nothing if None."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}", file=sys.stderr)

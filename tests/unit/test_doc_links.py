"""Links in the READMEs and docs/ point at files of this repository, never outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted(ROOT.glob("clients/*/README.md")),
    *sorted(ROOT.glob("examples/**/README.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    bad = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            bad.append(target)
    assert bad == []

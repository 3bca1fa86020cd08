"""Rules, their comments and the unit tests use phrasing of their own.

No sentence of the benchmark sessions (the scenario files bench/scenarios/*.json,
which bench/sessions.py plays) or of the corpora in
../shared/data appears verbatim in app/ or tests/unit/: a rule written for a
corpus sentence, or a unit test that is that sentence, would make the suite and
the published figures share one source. "Sentence" here: at least 6 words, or at
least 12 CJK characters; matching ignores case, punctuation and spacing.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

from bench.scenarios import data_files

ROOT = Path(__file__).resolve().parents[1]
# ../shared/data from the repository (also from a worktree nested further down).
SHARED_DATA = next(
    (p / "shared" / "data" for p in ROOT.parents if (p / "shared" / "data").is_dir()),
    ROOT.parent / "shared" / "data",
)
CORPORA = ("agent-sessions", "tau", "locomo", "longmemeval")
TARGETS = (ROOT / "app", ROOT / "tests" / "unit")

MIN_WORDS = 6
MIN_CJK = 12
WORD = re.compile(r"[a-z0-9]+")
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*|\n+")


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def cjk(text: str) -> str:
    return "".join(CJK.findall(text))


def sentences(text: str) -> Iterator[str]:
    """Pieces long enough to be phrasing: numbers alone (dates, times) do not count."""
    for piece in SENTENCE_END.split(text):
        lettered = [w for w in words(piece) if not w.isdigit()]
        if len(lettered) >= MIN_WORDS or len(cjk(piece)) >= MIN_CJK:
            yield piece.strip()


def strings_of_python(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def strings_of_json(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_of_json(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_of_json(v)


def bench_texts() -> Iterator[tuple[str, str]]:
    """(where, text) for every string of the benchmark sessions' scenario files."""
    for path in data_files():
        for s in strings_of_json(json.loads(path.read_text(encoding="utf-8"))):
            yield f"bench/scenarios/{path.name}", s


def source_texts() -> Iterator[tuple[str, str]]:
    """(where, text) for every string of the benchmark sessions and the corpora."""
    yield from bench_texts()
    for corpus in CORPORA:
        folder = SHARED_DATA / corpus
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            for s in strings_of_json(json.loads(path.read_text())):
                yield f"shared/data/{corpus}/{path.name}", s
        for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
            for s in strings_of_python(path):
                yield f"shared/data/{corpus}/{path.name}", s


class Index:
    """Word 6-grams and CJK 12-grams of the target files, to test sentences against."""

    def __init__(self, files: list[Path]) -> None:
        self.word_text: dict[Path, str] = {}
        self.cjk_text: dict[Path, str] = {}
        self.word_grams: set[tuple[str, ...]] = set()
        self.cjk_grams: set[str] = set()
        for path in files:
            text = path.read_text()
            ws, cs = words(text), cjk(text)
            self.word_text[path] = " " + " ".join(ws) + " "
            self.cjk_text[path] = cs
            self.word_grams.update(zip(*(ws[i:] for i in range(MIN_WORDS)), strict=False))
            self.cjk_grams.update(cs[i : i + MIN_CJK] for i in range(len(cs) - MIN_CJK + 1))

    def where(self, sentence: str) -> list[Path]:
        ws, cs = words(sentence), cjk(sentence)
        if len(ws) >= MIN_WORDS and tuple(ws[:MIN_WORDS]) in self.word_grams:
            needle = " " + " ".join(ws) + " "
            return [p for p, t in self.word_text.items() if needle in t]
        if len(cs) >= MIN_CJK and cs[:MIN_CJK] in self.cjk_grams:
            return [p for p, t in self.cjk_text.items() if cs in t]
        return []


def copied(files: list[Path], *, with_source: bool = True) -> list[str]:
    index = Index(files)
    hits: dict[tuple[Path, str], str] = {}
    for where, text in source_texts():
        for sentence in sentences(text):
            for path in index.where(sentence):
                hits.setdefault((path, sentence), where)
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:"
        f" {sentence!r}" + (f" (from {where})" if with_source else "")
        for (path, sentence), where in sorted(hits.items())
    ]


def target_files() -> list[Path]:
    return sorted(p for folder in TARGETS for p in folder.rglob("*.py"))


# Found when this check was written (notes/h17.md) and rephrased since by their
# owners: the list may only shrink, and an entry that is gone fails too.
KNOWN: set[tuple[str, str]] = set()


def test_no_corpus_sentence_in_rules_comments_or_unit_tests() -> None:
    found = copied(target_files(), with_source=False)
    known = {f"{path}: {sentence!r}" for path, sentence in KNOWN}
    assert sorted(set(found) - known) == []
    if SHARED_DATA.is_dir():  # without the corpora, only the scenario files are checked
        assert sorted(known - set(found)) == [], "rephrased: remove it from KNOWN"


def test_the_check_finds_a_copied_sentence(tmp_path: Path) -> None:
    """The check itself: a sentence of a scenario file planted in a file is found."""
    assert data_files(), "the scenario files are where bench/scenarios/__init__.py says"
    sentence = next(
        s for _, text in bench_texts() for s in sentences(text) if len(words(s)) >= MIN_WORDS
    )
    planted = tmp_path / "rule.py"
    planted.write_text(f"# {sentence.upper()}\nX = 1\n")
    clean = tmp_path / "clean.py"
    clean.write_text("# A sentence of our own, written for this test alone.\n")
    found = copied([planted, clean])
    assert found and all(f.startswith("rule.py:") for f in found)

"""``RULES_STAMP`` follows the rules' code, not their comments (on copies of the modules).

A stored units record carries the stamp of the rules that read it; a record with
another stamp is read again from the text. An edit of comments or docstrings must
keep the stamp (else an upgrade re-reads every stored turn for nothing), and any
change of code must change it (else stale units are trusted). On the previous stamp
(a digest of the files' bytes) the first test fails.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.compression.live_notes import RULES_MODULES, RULES_STAMP, code_digest, rules_stamp


@pytest.fixture
def copies(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for path in RULES_MODULES:
        out[path.name] = Path(shutil.copy(path, tmp_path / path.name))
    return out


def _stamp(copies: dict[str, Path]) -> str:
    return rules_stamp(copies.values())


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_the_copies_have_the_stamp_of_the_modules(copies: dict[str, Path]) -> None:
    assert _stamp(copies) == RULES_STAMP


def test_comments_docstrings_and_layout_keep_the_stamp(copies: dict[str, Path]) -> None:
    _edit(copies["patterns.py"], "_I = re.IGNORECASE\n", "_I = re.IGNORECASE  # case apart\n")
    _edit(copies["rules.py"], '"""RuleExtractor:', '"""RuleExtractor (reworded):')
    _edit(copies["deferral.py"], "def is_deferral(", "# a new comment line\n\n\ndef is_deferral(")
    _edit(
        copies["live_notes.py"],
        'def turn_units(text: str) -> tuple[Unit, ...]:\n    """',
        'def turn_units(text: str) -> tuple[Unit, ...]:\n    """Reworded. ',
    )
    assert _stamp(copies) == RULES_STAMP


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("rules.py", "MAX_SENTENCE_CHARS = 2_000", "MAX_SENTENCE_CHARS = 2_001"),  # a constant
        ("deferral.py", r'r"\b(?:park|shelve', r'r"\b(?:parks|shelve'),  # a pattern
        ("patterns.py", '"important|critical|', '"important|crucially|critical|'),  # a hint
        ("live_notes.py", '"todo", "pending"', '"todo", "fact", "pending"'),  # the kinds kept
        ("gates.py", "_SMALL_CLASS = 8", "_SMALL_CLASS = 9"),
        (
            "sentence.py",
            "turn_emphasized:\n        return True",
            "turn_emphasized:\n        return False",
        ),
    ],
)
def test_a_change_of_code_changes_the_stamp(
    copies: dict[str, Path], module: str, old: str, new: str
) -> None:
    _edit(copies[module], old, new)
    assert _stamp(copies) != RULES_STAMP


_ROOT = Path(__file__).resolve().parents[3]


def _imported(path: Path) -> set[Path]:
    """The modules of the app that ``path`` imports (``from app.x import y``: x, or x.y)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.module is None:
            continue
        if node.module.startswith("app."):
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            for name in names:
                base = _ROOT.joinpath(*name.split("."))
                out |= {p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()}
    return out


def test_the_stamp_covers_every_module_the_rules_import() -> None:
    """A module the extractor imports, however indirectly, shapes the units stored (the
    state's units, the text's normalising): left out, a change to it would keep the
    stamp, and stored records made by the old code would be trusted."""
    found, todo = set(), [_ROOT / "app/compression/extract/rules.py"]
    while todo:
        module = todo.pop()
        if module not in found:
            found.add(module)
            todo += _imported(module)
    stamped = {path.resolve() for path in RULES_MODULES}
    assert {module.resolve() for module in found} <= stamped
    assert len({path.name for path in RULES_MODULES}) == len(RULES_MODULES)  # keyed by name


def test_a_change_of_a_module_the_rules_import_changes_the_stamp(
    copies: dict[str, Path],
) -> None:
    _edit(
        copies["text.py"], "def normalize(", "def _unused() -> None:\n    pass\n\n\ndef normalize("
    )
    assert _stamp(copies) != RULES_STAMP


def test_the_digest_is_of_the_code() -> None:
    assert code_digest('"""Doc."""\nx = 1  # one\n') == code_digest(
        '"""Another doc,\nlonger."""\n\nx = (\n    1\n)\n'
    )
    assert code_digest("x = 1\n") != code_digest("x = 2\n")
    assert code_digest("y = x in {'a', 'b'}\n") == code_digest("y = x in {'b', 'a'}\n")
    assert code_digest("def f():\n    '''Doc.'''\n    return 1\n") == code_digest(
        "def f():\n    '''Other.'''\n\n    return 1  # the one\n"
    )


# The stamp, and the digest of code holding a set constant, as another process computes them.
_STAMPS = (
    "from app.compression.live_notes import RULES_STAMP, code_digest\n"
    'print(RULES_STAMP, code_digest(\'y = x in {"ab", "cd", "ef", "gh", "ij"}\'))'
)


def test_every_process_has_the_same_stamp() -> None:
    """Set constants iterate in an order each process's string hashing decides: a stamp
    that followed it would make every record "other rules" in the next process."""
    said = {
        subprocess.run(
            [sys.executable, "-c", _STAMPS],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3", "4")
    }
    assert len(said) == 1
    assert said.pop().split()[0] == RULES_STAMP

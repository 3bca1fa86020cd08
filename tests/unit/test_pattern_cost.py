"""Every compiled pattern in ``app/`` stays linear on hostile input (issue 16).

A pattern that backtracks (``\\w*(?:[_.]\\w+)+``, ``[\\d -]{8,}(\\d{4})\\b``) or that
re-scans the rest of the text from every start position (``.*$``, ``X+$``) turns a
few kilobytes of tool output into seconds of CPU, and ``re`` holds the GIL while it
runs. This harness finds every ``re.Pattern`` reachable from the globals of every
module under ``app`` (inside dicts, lists, tuples and sets too), so a new pattern is
checked without editing this file, and runs each over inputs built to trip the
usual blowups: runs of one character, alternations of two, the pattern's own
literal words repeated with separators, nested separators, long digit and letter
runs, CJK, and the reproductions from the issue.

Per pattern, robust on a loaded 2-core machine: a screen at 4,000 characters picks
the inputs that cost it most, and those run at the content limit (200,000
characters) under a ceiling (``_CEILING_S``) far above what a linear pattern needs
there and far below what a quadratic or exponential one needs (the run is aborted
at the ceiling, so a regression fails in seconds instead of hanging the suite).
Patterns written inline (``re.sub(r"…", …)`` inside a function) would escape the
discovery, so they are refused: every pattern is a module-level constant.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import pkgutil
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import app

CONTENT_LIMIT = 200_000  # app.api.validate: characters of one message's content
_SCREEN_SIZE = 4_000
_SCREEN_LIMIT_S = 1.0
_WORST_PER_PATTERN = 3
# At 200,000 characters. The slowest linear pattern needs ~0.8 s there on a loaded
# 2-core machine; a quadratic one needs 400× what it needs at 10,000 characters,
# where the old patterns took 0.5–9 s (so minutes), and an exponential one never ends.
_CEILING_S = 5.0
_COMPILED_GLOBAL = re.compile(r"^([A-Za-z_]\w*) = re\.compile\(", re.MULTILINE)
# A literal pattern inside a function (a pattern built at run time from data, such as
# an OpenAPI path template, is not a literal and not flagged).
_INLINE_PATTERN = re.compile(
    r"\bre\.(?:sub|subn|split|match|fullmatch|search|findall|finditer)\(\s*r?[\"']"
)


# ----------------------------------------------------------------------- discovery


def app_modules() -> list[ModuleType]:
    modules = [app]
    for info in pkgutil.walk_packages(app.__path__, prefix="app."):
        modules.append(importlib.import_module(info.name))
    return modules


def _patterns_in(value: object, depth: int = 0) -> Iterator[re.Pattern[str]]:
    if isinstance(value, re.Pattern):
        yield value
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            yield from _patterns_in(item, depth + 1)
    elif depth < 4 and isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _patterns_in(item, depth + 1)


def discover() -> dict[str, re.Pattern[str]]:
    """Every compiled pattern held by an ``app`` module, named module.GLOBAL[#i]."""
    found: dict[str, re.Pattern[str]] = {}
    seen: set[int] = set()
    for module in app_modules():
        for name, value in vars(module).items():
            if isinstance(value, ModuleType):
                continue
            for i, pattern in enumerate(_patterns_in(value)):
                if id(pattern) in seen or not isinstance(pattern.pattern, str):
                    continue
                seen.add(id(pattern))
                label = f"{module.__name__}.{name}"
                found[label if label not in found else f"{label}#{i}"] = pattern
    return found


# ------------------------------------------------------------------- hostile input

_CHARS = "aA1 \n\t_.-/@,:=\"'`#$()[]<>|\\*+!?~%;。，：中😀\u00a0"
_SEPARATORS = " \n_.-/@,:=\t。，"
_TAILS = ("", " x!", "\n")
_WORD = re.compile(r"[A-Za-z]{2,}|[\u4e00-\u9fff]{1,4}")


def _literals(pattern: re.Pattern[str], limit: int = 12) -> list[str]:
    """Words written in the pattern ("table", "once", "取消"): what its pieces expect."""
    words: dict[str, None] = {}
    for word in _WORD.findall(pattern.pattern):
        words.setdefault(word, None)
    return list(words)[:limit]


def _fill(unit: str, size: int) -> str:
    return (unit * (size // max(len(unit), 1) + 1))[:size]


def hostile_inputs(pattern: re.Pattern[str], size: int) -> dict[str, str]:
    """Named inputs of about ``size`` characters aimed at ``pattern``."""
    tailed: dict[str, str] = {}
    for c in _CHARS:
        tailed[f"run {c!r}"] = _fill(c, size)
    tailed["nested separators"] = _fill("a_b.c/d-e@f:g=h i,", size)
    tailed["digit groups"] = _fill("1234 ", size)
    tailed["digits, dashes"] = _fill("12-", size)
    tailed["cjk and punctuation"] = _fill("中文，", size)
    inputs = {f"{name} +{tail!r}": text + tail for name, text in tailed.items() for tail in _TAILS}
    for a in "a1中":
        for b in _SEPARATORS:
            inputs[f"alt {a + b!r}"] = _fill(a + b, size)
    # The reproductions of issue 16.
    inputs["x newlines x"] = "x" + "\n" * size + "x"
    inputs["mg digits"] = "mg " + "1" * size
    inputs["underscores"] = "a" + "_" * size + "!"
    inputs["letters then digit"] = "a" * size + "1!"
    for word in _literals(pattern):
        for sep in (" ", "", "\n", "_"):
            inputs[f"{word!r}{sep!r}×n"] = _fill(word + sep, size) + "!"
        inputs[f"{word!r} letters"] = word + " " + "a" * size + "!"
        inputs[f"{word!r} digits"] = word + " " + "1" * size + "!"
        inputs[f"{word!r} spaced"] = word + _fill(" a", size) + "!"
    return inputs


class _Overtime(Exception):
    pass


def _raise_overtime(signum: int, frame: object) -> None:
    raise _Overtime


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Abort a runaway match (``re`` checks for signals while it backtracks)."""
    previous = signal.signal(signal.SIGALRM, _raise_overtime)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cost(pattern: re.Pattern[str], text: str, limit_s: float) -> float:
    """Seconds to search, scan (finditer: what sub, split and findall do) and match
    ``text``; ``inf`` past ``limit_s``."""
    started = time.perf_counter()
    try:
        with _alarm(limit_s):
            pattern.search(text)
            for _ in pattern.finditer(text):
                pass
            pattern.match(text)
    except _Overtime:
        return math.inf
    return time.perf_counter() - started


def slowest_inputs(pattern: re.Pattern[str], size: int, count: int) -> list[str]:
    """Names of the ``count`` inputs of ``size`` characters that cost ``pattern`` most."""
    timed = [
        (cost(pattern, text, _SCREEN_LIMIT_S), name)
        for name, text in hostile_inputs(pattern, size).items()
    ]
    return [name for _, name in sorted(timed, reverse=True)[:count]]


# ---------------------------------------------------------------------------- tests

PATTERNS = discover()


def test_the_harness_sees_every_pattern_of_the_app() -> None:
    """Coverage: the modules known to hold patterns are all seen, patterns nested in
    tuples too, and every ``re.compile`` written at module level in ``app/`` is found."""
    modules = {label.rsplit(".", 1)[0] for label in PATTERNS}
    assert {
        "app.compression.extract.patterns",
        "app.compression.extract.entities",
        "app.compression.extract.sentence",
        "app.compression.extract.rules",
        "app.compression.extract.tools",
        "app.compression.text",
        "app.compression.triggers",
        "app.memories.lexical",
        "app.memories.gate",
    } <= modules
    assert "app.compression.extract.patterns.HIGH_STAKES#1" in PATTERNS
    # Source check: every module-level ``NAME = re.compile(`` is among the discovered
    # (the same pattern compiled twice is one object: ``re`` caches it).
    root = Path(app.__file__).parent
    found = {id(pattern) for pattern in PATTERNS.values()}
    written = {
        (".".join(("app", *path.relative_to(root).with_suffix("").parts)), name)
        for path in root.rglob("*.py")
        for name in _COMPILED_GLOBAL.findall(path.read_text())
    }
    missed = [
        f"{module}.{name}"
        for module, name in written
        if id(getattr(importlib.import_module(module), name)) not in found
    ]
    assert written and not missed
    inline = [
        f"{path.relative_to(root)}: {line.strip()}"
        for path in root.rglob("*.py")
        for line in path.read_text().splitlines()
        if _INLINE_PATTERN.search(line)
    ]
    assert not inline, "patterns written inline escape this harness:\n" + "\n".join(inline)


@pytest.mark.parametrize("label", sorted(PATTERNS))
def test_pattern_cost_is_linear_up_to_the_content_limit(label: str) -> None:
    pattern = PATTERNS[label]
    worst = slowest_inputs(pattern, _SCREEN_SIZE, _WORST_PER_PATTERN)
    inputs = hostile_inputs(pattern, CONTENT_LIMIT)
    for name in worst:
        elapsed = cost(pattern, inputs[name], _CEILING_S)
        assert elapsed < _CEILING_S, (
            f"{label} took over {_CEILING_S} s on {name} at {CONTENT_LIMIT:,} characters"
        )

"""Plant one-line bugs, one at a time, and see whether the tests notice.

Each mutation in ``tools/mutations.toml`` names a file, an exact snippet that must
occur exactly once in it, its replacement, and the test files that should catch it.
The tree is exported from git (``--rev``, default HEAD) into a temporary folder, so
the working tree is never touched; ``--tests-rev`` takes tests/ from another commit
(the score of the old tests against the same code). A mutant is *killed* when its
tests fail (or time out), *survived* when they pass. The score is killed / planted.

    .venv/bin/python tools/mutate.py                    # every mutation, HEAD
    .venv/bin/python tools/mutate.py --rev main --only queue-skip-locked
    .venv/bin/python tools/mutate.py --rev main --tests-rev 6392ebf   # before

Slow (a test run per mutant, Postgres included): not part of the suite or CI.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTATIONS = Path(__file__).with_name("mutations.toml")


@dataclass(frozen=True)
class Mutation:
    id: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


def load(path: Path = MUTATIONS) -> list[Mutation]:
    data = tomllib.loads(path.read_text())
    groups = data["tests"]
    return [
        Mutation(
            id=m["id"],
            path=m["path"],
            old=m["old"],
            new=m["new"],
            tests=tuple(groups[m["tests"]]),
            why=m.get("why", ""),
        )
        for m in data["mutation"]
    ]


def export(rev: str, into: Path, only: str | None = None) -> None:
    """``git archive`` of ``rev`` (optionally one folder of it) extracted into ``into``."""
    cmd = ["git", "archive", "--format=tar", rev]
    if only:
        cmd.append(only)
    blob = subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")


def run_tests(tree: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[str, str]:
    """("passed" | "failed" | "timeout", the first failing test)."""
    present = [t for t in tests if (tree / t.split("::")[0]).exists()]
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *present]
    try:
        done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    if done.returncode == 0:
        return "passed", ""
    failed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    return "failed", failed[0].split("::", 1)[-1] if failed else done.stdout[-200:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="code (and tests) from this commit")
    parser.add_argument("--tests-rev", help="tests/ from this commit instead")
    parser.add_argument("--only", nargs="*", help="mutation ids")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per mutant")
    parser.add_argument("--mutations", type=Path, default=MUTATIONS, help="the list (TOML)")
    args = parser.parse_args(argv)

    mutations = [m for m in load(args.mutations) if not args.only or m.id in args.only]
    with tempfile.TemporaryDirectory(prefix="mnemo-mutate-") as tmp:
        tree = Path(tmp)
        export(args.rev, tree)
        if args.tests_rev:
            subprocess.run(["rm", "-rf", str(tree / "tests")], check=True)
            export(args.tests_rev, tree, only="tests")
        head = subprocess.run(
            ["git", "rev-parse", "--short", args.rev], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        print(f"code at {args.rev} ({head}); tests at {args.tests_rev or args.rev}")
        # Mutants only mean something against tests that pass unmutated.
        every = tuple(sorted({t for m in mutations for t in m.tests}))
        baseline, failing = run_tests(tree, every, args.timeout * 2)
        if baseline != "passed":
            print(f"the unmutated tests do not pass ({baseline} {failing}); no score")
            return 2
        killed = stale = 0
        for m in mutations:
            source = tree / m.path
            original = source.read_text()
            if original.count(m.old) != 1:
                # The code moved on: the snippet needs updating; not counted.
                print(f"{m.id:<34} STALE    (snippet found {original.count(m.old)} times)")
                stale += 1
                continue
            source.write_text(original.replace(m.old, m.new))
            t0 = time.monotonic()
            try:
                outcome, by = run_tests(tree, m.tests, args.timeout)
            finally:
                source.write_text(original)
            caught = outcome != "passed"
            killed += caught
            verdict = "killed" if caught else "SURVIVED"
            took = time.monotonic() - t0
            print(f"{m.id:<34} {verdict:<8} {took:4.0f} s  {by or m.why}")
            sys.stdout.flush()
        planted = len(mutations) - stale
        print(f"score: {killed}/{planted} killed ({100 * killed / max(planted, 1):.0f}%)")
        if stale:
            print(f"{stale} stale mutation(s) not planted: update tools/mutations.toml")
    return 0


if __name__ == "__main__":
    sys.exit(main())

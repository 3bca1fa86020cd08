"""Extractor functions a test can run in the extraction child process by name
(``IsolatedRuleExtractor(target="tests.fakes.extractors:runaway")``)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from app.compression.state import ArtifactUnit, TaskState, Unit
from app.core.turns import TurnView

RUNAWAY = "tests.fakes.extractors:runaway"
BROKEN = "tests.fakes.extractors:broken"
INVALID = "tests.fakes.extractors:invalid"
DIES = "tests.fakes.extractors:dies"

# The table-name pattern before issue 16: exponential in a run of underscores. A
# match holds the GIL for as long as it runs, so only a process can be stopped.
_OLD_SNAKE_TABLE = re.compile(r"\b[A-Za-z_]\w*(?:[_.]\w+)+\s+table\b")


def runaway(turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
    _OLD_SNAKE_TABLE.search("a" + "_" * 60 + "!")
    raise AssertionError("unreachable: the match above does not end in a test's lifetime")


def broken(turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
    raise ValueError("a bug in the extractor")


def invalid(turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
    """A unit its own model refuses: a pydantic ValidationError, as extraction can raise."""
    return [ArtifactUnit(artifact_kind="url", value="https://example.com", source_seqs=[])]


def dies(turns: Sequence[TurnView], state: TaskState) -> list[Unit]:
    os._exit(3)

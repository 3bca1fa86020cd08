"""The rendered task state as the judge reads it: markers, section headers, title.

Everything here is derived from ``app.compression.render.LABELS``, the strings the
compressor renders with, so a relabelled state cannot drift from what is judged.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from app.compression.diff import CHANGED
from app.compression.render import LABELS

_LABELS = tuple(LABELS.values())


def _prefixes(key: str, field: str | None = None, suffix: str = "") -> tuple[str, ...]:
    """The text each language's label ``key`` starts with, up to its ``{field}``."""
    return tuple(
        (lab[key].split("{" + field + "}")[0] if field else lab[key]) + suffix for lab in _LABELS
    )


# Line markers of the rendered state ("Done …", "Pending: …", "- name: value (was …)").
DONE = _prefixes("done", suffix=" ")
FAILED = _prefixes("failed", suffix=" ")
CALLED = _prefixes("called", suffix=" ")
# A lookup's line ("Looked up lookup_order → order_id=…"): a successful call too.
READ = _prefixes("read", suffix=" ")
PENDING = _prefixes("pending", "text")
WAS = _prefixes("was", "old")
MISSING = _prefixes("missing", "items")
ANSWERED = _prefixes("answered", "q")
# The change notice's "name changed A → B" / "name 由 A 改为 B": A is marked as former.
CHANGED_FROM = re.compile(
    "|".join(
        re.escape(t.split("{name}")[1].split("{was}")[0])
        + "[^;；]*?"
        + re.escape(t.split("{was}")[1].split("{value}")[0])
        for t in CHANGED.values()
    )
)
# The task-state block's title, up to the turn number.
STATE_TITLES = _prefixes("title", "n")


@dataclass
class StateView:
    """A rendered task state split into its sections (header → lines)."""

    lines: list[str]
    sections: dict[str, list[str]]

    @classmethod
    def parse(cls, text: str) -> StateView:
        headers = {}
        for lab in LABELS.values():
            for key in ("constraints", "pinned", "preferences", "actions", "params", "artifacts"):
                headers[lab[key]] = key
            for key in ("decisions", "facts", "pending_header", "todos", "blockers", "revoked"):
                headers[lab[key]] = key
        sections: dict[str, list[str]] = defaultdict(list)
        current = "head"
        lines = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            if line in headers:
                current = headers[line]
                continue
            lines.append(line)
            sections[current].append(line)
        return cls(lines=lines, sections=dict(sections))

    def section(self, name: str) -> list[str]:
        return self.sections.get(name, [])

    def params(self) -> list[tuple[str, str, str, str]]:
        """(line, name, current value, superseded part) of each parameter line."""
        out = []
        for line in self.section("params"):
            body = line[2:] if line.startswith("- ") else line
            cut = min((i for i in (body.find(": "), body.find("：")) if i >= 0), default=-1)
            if cut < 0:
                continue
            name, rest = body[:cut], body[cut + (2 if body[cut] == ":" else 1) :]
            was = min((i for i in (rest.find(w) for w in WAS) if i >= 0), default=len(rest))
            out.append((line, name, rest[:was], rest[was:]))
        return out


def split_system(system: str) -> tuple[str, str]:
    """(task-state block, the other blocks) of the context's system message."""
    blocks = re.split(r"\n\n(?=## )", system)
    state = [b for b in blocks if b.startswith(STATE_TITLES)]
    other = [b for b in blocks if not b.startswith(STATE_TITLES)]
    return "\n\n".join(state), "\n\n".join(other)


def state_through(state: str) -> int:
    """The last turn seq the rendered state covers (-1: no state yet)."""
    for title in STATE_TITLES:
        if state.startswith(title):
            digits = re.match(r"\d+", state[len(title) :])
            return int(digits.group()) if digits else -1
    return -1


def state_language(state: str) -> str | None:
    return next(
        (lang for lang, title in zip(LABELS, STATE_TITLES, strict=True) if state.startswith(title)),
        None,
    )

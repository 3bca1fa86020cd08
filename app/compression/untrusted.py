"""Text that came from turns is data, never structure or instructions.

The rendered task state is a block of lines with fixed headings ("Pending: …",
"Constraints (must follow):") that agents and models rely on. A value copied out
of a turn (a function name, an argument, a tool's output) must not be able to
start a line of its own: line breaks and other control or invisible formatting
characters become spaces, and every value is clipped. What is copied verbatim
from a tool's output is shown in quotation marks, as a quote, not a statement.
"""

from __future__ import annotations

import re
from typing import Any

from app.compression.state import TaskState
from app.core.bounded import clip_text

# One value in a rendered line; longer text is cut (unit texts are at most 2,000).
LINE_CHARS = 2000
# C0 and C1 controls (line breaks included), Unicode line and paragraph separators,
# zero-width and bidirectional formatting characters, the byte-order mark.
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]+"
)
_SPACES = re.compile(r"\s+")
OPEN_QUOTE, CLOSE_QUOTE = "“", "”"


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` as one line of printable characters, at most ``limit`` long."""
    flat = _SPACES.sub(" ", _UNPRINTABLE.sub(" ", text)).strip()
    return clip_text(flat, limit)


def quoted(text: str) -> str:
    """``text`` marked as a quotation (its own quotation marks made plain)."""
    if not text:
        return text
    inner = text.replace(OPEN_QUOTE, '"').replace(CLOSE_QUOTE, '"')
    return f"{OPEN_QUOTE}{inner}{CLOSE_QUOTE}"


def one_line_tree(value: Any, limit: int = LINE_CHARS) -> Any:
    """``one_line`` over every string and object key inside a JSON-like value."""
    if isinstance(value, str):
        return one_line(value, limit)
    if isinstance(value, dict):
        return {one_line(str(k), limit): one_line_tree(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [one_line_tree(v, limit) for v in value]
    return value


# Results whose summary is a tool's own words (plain text, an error message), as
# opposed to a digest Mnemo wrote (``pnr=QX7T2L``, ``12 items``).
QUOTED_RESULTS = frozenset({"text", "error"})


def neutral_state(state: TaskState) -> TaskState:
    """A copy of ``state`` fit to render: every text one clipped line, tool output quoted."""
    data = one_line_tree(state.model_dump(mode="json"))
    for action in data["actions"]:
        if action["result_type"] in QUOTED_RESULTS and action["result_summary"]:
            action["result_summary"] = quoted(action["result_summary"])
    return TaskState.model_validate(data)

"""The change notice: one short line telling the agent what the last compression did.

Each compression writes a two-sentence ``change_summary`` (what changed, what is
outstanding, see ``diff.py``). Right after a compression the agent's older turns
have left the context; this line, carried in the task-state block until the user
speaks again, tells it where it stands. Pure: no I/O.
"""

from __future__ import annotations

from app.compression.text import clip

NOTICE_CHARS = 240
_PREFIX = {"en": "Since the last compression: ", "zh": "自上次压缩以来："}


def notice_line(summary: str, language: str | None) -> str:
    """``summary`` as one line, prefixed in the session's language ('' for no summary)."""
    if not summary.strip():
        return ""
    prefix = _PREFIX.get(language or "en", _PREFIX["en"])
    return prefix + clip(summary, NOTICE_CHARS - len(prefix))


def with_notice(rendered: str, notice: str) -> str:
    """The task-state text with the notice as its last line."""
    if not notice:
        return rendered
    return f"{rendered}\n{notice}" if rendered else notice

"""Every kind of job the worker runs, and the priority each is claimed at.

The kind is what the ``jobs`` table stores and what a handler declares
(``app/services/jobs.py``). The priority goes with the kind, not with the generic
queue: whoever enqueues a job (ingest, a route, another job) writes it without
knowing the handler, and the queue only orders by it.
"""

from __future__ import annotations

from enum import StrEnum


class JobKind(StrEnum):
    COMPRESS = "compress"
    PROMOTE = "promote"
    INDEX_SESSION = "index_session"
    EMBED_MEMORIES = "embed_memories"
    RECOUNT_TOKENS = "recount_tokens"
    READ_UNITS = "read_units"
    RESTAMP_UNITS = "restamp_units"

    @property
    def priority(self) -> int:
        """Claimed highest first."""
        return priority_of(self)


# Compression shapes the very next context; promotion and indexing only feed
# long-term memory and can wait. Reading a bulk post's units goes first of all: it
# costs a few ms of CPU a session, and until it is done every API process reads those
# turns from their text on its first context read of the session (13-19 ms of the
# event loop each), and a compression reads them again for the turns it leaves live.
# Re-storing the records an upgrade made stale (``services/restamp.py``) goes last of
# all: nothing waits for it but the CPU those records cost each read.
_PRIORITY: dict[str, int] = {
    JobKind.READ_UNITS: 15,
    JobKind.COMPRESS: 10,
    JobKind.PROMOTE: 5,
    JobKind.RECOUNT_TOKENS: 5,
    JobKind.INDEX_SESSION: 0,
    JobKind.EMBED_MEMORIES: 0,
    JobKind.RESTAMP_UNITS: -5,
}


def priority_of(kind: str) -> int:
    """The claim priority of a kind (0 for a name that is no ``JobKind``, e.g. a test's)."""
    return _PRIORITY.get(kind, 0)

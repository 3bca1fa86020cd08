"""LongMemEval (Wu et al., ICLR 2025) read into the neutral ``Dataset``.

* One Mnemo user per question (``lme-<question_id>``), one Mnemo session per
  haystack session, posted in the file's order.
* Session ids are **renamed** before anything is sent: the dataset's ids start
  with ``answer_`` for evidence, so they would leak the label. The i-th haystack
  session becomes ``lme-<question_id>-S<i>`` and its turns ``S<i>:<j>``; the
  mapping back (``Dataset.session_labels``) stays in the benchmark process.
* ``has_answer`` flags are read into ``Question.evidence_turns`` and never sent.
* Times: ``haystack_dates`` (``"2023/05/20 (Sat) 02:21"``) for a session's first
  turn, then +30 s per turn.
* Abstention questions (``_abs``) are loaded but not scored for retrieval, as in
  the benchmark's own retrieval evaluation.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.datasets.model import Dataset, Question, Session, Turn, User, api_id

TURN_STEP = timedelta(seconds=30)
QUESTION_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
LEAKY = re.compile(r"answer", re.IGNORECASE)


def parse_date(text: str) -> datetime:
    """``"2023/05/20 (Sat) 02:21"`` → an aware UTC datetime."""
    cleaned = re.sub(r"\([^)]*\)", " ", text)
    return datetime.strptime(" ".join(cleaned.split()), "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def renamed_session(user_id: str, index: int) -> tuple[str, str]:
    """(Mnemo session id, short label used in turn ids) of the ``index``-th session (1-based)."""
    label = f"S{index}"
    return api_id(user_id, label), label


def convert(records: list[dict[str, Any]], *, namespace: str = "lme") -> Dataset:
    users: list[User] = []
    questions: list[Question] = []
    labels: dict[str, str] = {}
    for record in records:
        qid = str(record["question_id"])
        user_id = api_id(namespace, qid)
        if LEAKY.search(user_id):
            raise ValueError(f"question id {qid!r} would leak a label into a user id")
        original = {}
        sessions: list[Session] = []
        evidence_turns: set[str] = set()
        triples = zip(
            record["haystack_session_ids"],
            record["haystack_dates"],
            record["haystack_sessions"],
            strict=True,
        )
        for index, (dataset_sid, date, raw_turns) in enumerate(triples, start=1):
            session_id, label = renamed_session(user_id, index)
            original[str(dataset_sid)] = session_id
            labels[session_id] = str(dataset_sid)
            start = parse_date(str(date))
            turns = []
            for j, raw in enumerate(raw_turns, start=1):
                dataset_id = f"{label}:{j}"
                if raw.get("has_answer"):
                    evidence_turns.add(dataset_id)
                turns.append(
                    Turn(
                        dataset_id=dataset_id,
                        role=str(raw["role"]),
                        content=str(raw.get("content") or ""),
                        created_at=rfc3339(start + (j - 1) * TURN_STEP),
                    )
                )
            sessions.append(Session(session_id, rfc3339(start), tuple(turns)))
        users.append(User(user_id, tuple(sessions)))
        evidence_sessions = frozenset(
            original[s] for s in record.get("answer_session_ids", []) if s in original
        )
        answer = record.get("answer")
        questions.append(
            Question(
                question_id=qid,
                user_id=user_id,
                question=str(record["question"]),
                answer=None if answer is None else str(answer),
                category=str(record["question_type"]),
                evidence_turns=frozenset(evidence_turns),
                evidence_sessions=evidence_sessions,
                scored=not qid.endswith("_abs") and bool(evidence_sessions),
            )
        )
    return Dataset("longmemeval", users, questions, labels, {t: t for t in QUESTION_TYPES})


# Kept aside, never tuned on: every fourth question of the file (positions 3, 7, …),
# which in the dev file spans multi-session, preference and temporal questions.
HELDOUT_EVERY = 4


def split_records(records: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """``dev`` (tuned on), ``heldout`` (every fourth question, kept aside) or ``all``."""
    if split == "all":
        return records
    if split not in ("dev", "heldout"):
        raise ValueError(f"unknown split {split!r}")
    keep = split == "heldout"
    return [r for i, r in enumerate(records) if (i % HELDOUT_EVERY == HELDOUT_EVERY - 1) == keep]


def load(path: Path, *, limit: int | None = None, split: str = "all") -> Dataset:
    records = split_records(json.loads(Path(path).read_text(encoding="utf-8")), split)
    if limit is not None:
        records = records[:limit]
    return convert(records)

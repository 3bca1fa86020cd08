"""LoCoMo (Maharana et al., ACL 2024) read into the neutral ``Dataset``.

* One Mnemo user per conversation (``locomo-<sample_id>``), one Mnemo session
  per ``session_<N>`` list (``locomo-<sample_id>-D<N>``), turns in order.
* Roles: ``speaker_a`` is ``user`` and ``speaker_b`` is ``assistant`` (Mnemo
  models an agent's user and assistant; in LoCoMo both are people, so the
  choice is arbitrary but fixed); the speaker's name goes in ``name``.
* A shared image is kept as text, the way a chat log would show it:
  ``<text> [shares a photo: <blip_caption>]``.
* Times: the session's ``date_time`` for its first turn, then +30 s per turn.
* Evidence is normalised as the dataset README prescribes (split on ';' and
  whitespace, ``D:11:26`` → ``D11:26``, no leading zeros, ids with no turn dropped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.datasets.model import Dataset, Question, Session, Turn, User, api_id

CATEGORIES = {
    "1": "multi-hop",
    "2": "temporal",
    "3": "open-domain",
    "4": "single-hop",
    "5": "adversarial",
}
TURN_STEP = timedelta(seconds=30)
_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_ID = re.compile(r"D(\d+):(\d+)")


def parse_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → an aware UTC datetime."""
    cleaned = " ".join(text.split())
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"unrecognised LoCoMo date {text!r}")


def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def normalise_evidence(entries: Iterable[Any], known: Iterable[str]) -> list[str]:
    """The valid ``D<s>:<t>`` ids in ``entries``, in order, without duplicates."""
    existing = set(known)
    out: dict[str, None] = {}
    for entry in entries:
        for piece in re.split(r"[;\s]+", str(entry)):
            piece = re.sub(r"^D:", "D", piece.strip())
            match = _EVIDENCE_ID.fullmatch(piece)
            if not match:
                continue
            dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
            if dia_id in existing:
                out.setdefault(dia_id, None)
    return list(out)


def session_of(dia_id: str) -> str:
    """``"D3:7"`` → ``"D3"``."""
    return dia_id.split(":", 1)[0]


def turn_content(turn: Mapping[str, Any]) -> str:
    text = str(turn.get("text") or "").strip()
    caption = str(turn.get("blip_caption") or "").strip()
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def _session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    numbers = []
    for key, value in conversation.items():
        match = _SESSION_KEY.fullmatch(key)
        if match and isinstance(value, list):
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def convert(records: list[dict[str, Any]], *, namespace: str = "locomo") -> Dataset:
    users: list[User] = []
    questions: list[Question] = []
    labels: dict[str, str] = {}
    for record in records:
        sample = str(record["sample_id"])
        conversation = record["conversation"]
        user_id = api_id(namespace, sample)
        roles = {conversation["speaker_a"]: "user", conversation["speaker_b"]: "assistant"}
        sessions: list[Session] = []
        by_label: dict[str, str] = {}
        known: list[str] = []
        for number in _session_numbers(conversation):
            start = parse_date(conversation[f"session_{number}_date_time"])
            session_id = api_id(user_id, f"D{number}")
            by_label[f"D{number}"] = session_id
            labels[session_id] = f"{sample}/session_{number}"
            turns = []
            for i, raw in enumerate(conversation[f"session_{number}"]):
                # The README guarantees dia_id D<n>:<i+1>; we trust position, not the field.
                dataset_id = f"D{number}:{i + 1}"
                known.append(dataset_id)
                speaker = str(raw.get("speaker") or "")
                turns.append(
                    Turn(
                        dataset_id=dataset_id,
                        role=roles.get(speaker, "assistant"),
                        content=turn_content(raw),
                        created_at=rfc3339(start + i * TURN_STEP),
                        name=speaker or None,
                    )
                )
            sessions.append(Session(session_id, rfc3339(start), tuple(turns)))
        users.append(User(user_id, tuple(sessions)))
        for index, qa in enumerate(record.get("qa", [])):
            evidence = normalise_evidence(qa.get("evidence") or [], known)
            answer = qa.get("answer")
            questions.append(
                Question(
                    question_id=api_id(sample, f"q{index}"),
                    user_id=user_id,
                    question=str(qa["question"]),
                    answer=None if answer is None else str(answer),
                    category=str(qa["category"]),
                    evidence_turns=frozenset(evidence),
                    evidence_sessions=frozenset(by_label[session_of(e)] for e in evidence),
                    scored=bool(evidence),
                )
            )
    return Dataset("locomo", users, questions, labels, dict(CATEGORIES))


# Kept aside, never tuned on: the last conversation of the dev file.
HELDOUT = ("conv-43",)


def split_records(records: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """``dev`` (tuned on), ``heldout`` (``HELDOUT``, kept aside) or ``all``."""
    if split == "all":
        return records
    if split not in ("dev", "heldout"):
        raise ValueError(f"unknown split {split!r}")
    keep = split == "heldout"
    return [r for r in records if (str(r["sample_id"]) in HELDOUT) == keep]


def load(path: Path, *, limit_conversations: int | None = None, split: str = "all") -> Dataset:
    records = split_records(json.loads(Path(path).read_text(encoding="utf-8")), split)
    if limit_conversations is not None:
        records = records[:limit_conversations]
    return convert(records)

"""The /events response models keep the JSON the routes served before they had them."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta, timezone

from fastapi.encoders import jsonable_encoder

from app.api.schemas import EventOut, EventSummaryOut
from app.compression.audit import Event


def an_event(created_at: datetime) -> Event:
    return Event(
        id=7,
        created_at=created_at,
        trigger="tool_failures",
        tier=2,
        state_version=3,
        turn_count=4,
        input_tokens=900,
        output_tokens=60,
        ratio=15.0,
        duration_ms=12.5,
        extractor="rules",
        fallback_reason=None,
        change_summary="+1 constraint",
        job_id=11,
        llm_prompt_tokens=120,
        llm_completion_tokens=None,
        turn_ids=["m-1", "t_2"],
        turn_seqs=[1, 2],
        units=[{"kind": "constraint", "text": "no overnight trains", "source_seqs": [1]}],
        rendered_state="Constraints: no overnight trains",
    )


def test_an_event_is_the_json_fastapi_made_of_the_plain_values() -> None:
    for zone in (UTC, timezone(timedelta(hours=8))):
        event = an_event(datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=zone))
        served = EventOut.model_validate(event).model_dump(mode="json")
        assert served == jsonable_encoder(asdict(event))
        assert served["created_at"].endswith(("+00:00", "+08:00"))


def test_a_listed_event_leaves_out_the_inputs_and_the_rendering() -> None:
    event = an_event(datetime(2026, 3, 1, tzinfo=UTC))
    listed = EventSummaryOut.model_validate(event).model_dump(mode="json")
    assert set(asdict(event)) - set(listed) == {"turn_ids", "turn_seqs", "units", "rendered_state"}

"""The audit record's trigger: the reasons the trigger policy gives, nothing else."""

from __future__ import annotations

from typing import get_args

import pytest

from app.compression.audit import as_trigger
from app.compression.triggers import TriggerReason


@pytest.mark.parametrize("reason", get_args(TriggerReason))
def test_every_trigger_reason_is_read_back(reason: str) -> None:
    assert as_trigger(reason) == reason


@pytest.mark.parametrize("value", ["", "Manual", "token-threshold", "drift"])
def test_a_reason_no_policy_gives_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="unknown compression trigger"):
        as_trigger(value)

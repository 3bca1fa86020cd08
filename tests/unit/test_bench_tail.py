"""bench.tail splits a read's client latency into what the server's probe saw."""

from __future__ import annotations

import pytest

from bench.tail import parts


def test_a_read_split_into_the_server_phases() -> None:
    client = {"t0": 10.000, "t1": 10.020}
    server = {
        "arrived": 10.001,
        "entered": 10.004,
        "steps": [("checkout", 10.005, 10.006), ("read_context", 10.006, 10.010)],
        "body_sent": 10.015,
        "left": 10.016,
    }
    ms = parts(client, server)
    assert ms["total"] == pytest.approx(20)
    assert ms["before"] == pytest.approx(1)  # sent, not read yet
    assert ms["queue"] == pytest.approx(3)  # read, the app not entered yet
    assert ms["checkout"] == pytest.approx(1)
    assert ms["read_context"] == pytest.approx(4)
    assert ms["app"] == pytest.approx(11)
    assert ms["after"] == pytest.approx(5)  # written, not received yet
    assert ms["before"] + ms["queue"] + ms["app"] + ms["after"] == pytest.approx(ms["total"])


def test_a_read_the_probe_missed_is_its_total_alone() -> None:
    assert parts({"t0": 1.0, "t1": 1.5}, None) == {"total": 500.0}

"""bench.side_by_side: blocks alternate between the sides, rounds are won by the lower
p50, and bodies that differ between the codes are counted, not hidden."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench import side_by_side


class FakeService:
    code = Path("/checkout")


class FakeSide:
    """A side whose reads take ``ms`` each and answer ``body(path)``."""

    def __init__(self, name: str, ms: float, body: str, order: list[str] | None = None) -> None:
        self.name, self.ms, self.body = name, ms, body
        self.order = [] if order is None else order  # every side's blocks, in turn
        self.service = FakeService()
        self.p50s: list[float] = []
        self.reads, self.api_s, self.pg_s, self.client_s = 0, 0.0, 0.0, 0.0
        self.calls: list[tuple[str, ...]] = []

    def block(self, paths: Sequence[str]) -> tuple[list[float], list[bytes]]:
        self.calls.append(tuple(paths))
        self.order.append(self.name)
        self.reads += len(paths)
        self.api_s += 0.002 * len(paths)
        self.client_s += 0.001 * len(paths)
        return [self.ms / 1000] * len(paths), [f"{self.body}{p}".encode() for p in paths]


def test_blocks_alternate_and_the_faster_side_wins_its_rounds() -> None:
    order: list[str] = []
    a, b = FakeSide("A", 3.0, "x", order), FakeSide("B", 2.0, "x", order)
    paths = [f"/p{i}" for i in range(10)]
    result = side_by_side.measure([a, b], paths, rounds=4, block=3)  # type: ignore[list-item]
    # warm-up A, B; then A B, B A, A B, B A
    assert order == ["A", "B", "A", "B", "B", "A", "A", "B", "B", "A"]
    assert result["sides"]["B"]["faster_rounds"] == 4
    assert result["sides"]["A"]["p50_ms_median"] == 3.0
    assert result["sides"]["A"]["api_cpu_ms_per_read"] == 2.0  # the warm-up is not counted
    assert a.calls[1] == b.calls[1] == ("/p0", "/p1", "/p2")  # both sides read the same paths
    assert result["bodies_compared"] == {"identical": 3, "different": 0}
    assert result["sides"]["A"]["client_cpu_ms_per_read"] == 1.0
    # what the measured reads carried: 4 rounds of 3 reads, bodies "x/p0" … (4 bytes)
    assert result["sides"]["A"]["reads"] == 12
    assert result["sides"]["A"]["body_bytes_per_read"] == 4
    assert result["sides"]["A"]["reads_with_memories"] == 0


def test_different_bodies_are_counted() -> None:
    a, b = FakeSide("A", 1.0, "x"), FakeSide("B", 1.0, '{"kind":"memories"}')
    result = side_by_side.measure([a, b], ["/p0", "/p1"], rounds=2, block=2)  # type: ignore[list-item]
    assert result["bodies_compared"] == {"identical": 0, "different": 2}
    # and what each side carried: B's reads have a memory block, A's none
    assert [result["sides"][s]["reads_with_memories"] for s in "AB"] == [0, 4]
    assert [result["sides"][s]["body_bytes_per_read"] for s in "AB"] == [4, 22]

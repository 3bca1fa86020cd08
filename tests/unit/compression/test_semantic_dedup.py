"""Semantic dedup in the worker: vectors for the texts merging compares."""

from __future__ import annotations

from collections.abc import Sequence

from app.compression.merge import merge
from app.compression.state import ConstraintUnit, TaskState, Unit
from app.providers.embed import EmbeddingUnavailable
from app.services.compression import unit_embeddings

SAME = [1.0, 0.0, 0.0]
OTHER = [0.0, 1.0, 0.0]


class Scripted:
    """An embedder that maps known paraphrases to one direction."""

    model_id = "scripted"
    dim = 3

    def __init__(self, paraphrases: set[str]) -> None:
        self.paraphrases = paraphrases
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [SAME if t in self.paraphrases else OTHER for t in texts]


class Down:
    model_id = "down"
    dim = 3

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise EmbeddingUnavailable("connection refused")


FIRST = "Keep the staging database read-only."
SECOND = "The staging DB must stay read only."


async def test_paraphrases_become_one_item_and_the_state_is_compared_too() -> None:
    earlier = merge(TaskState(), [ConstraintUnit(text=FIRST, source_seqs=[1])])
    units: list[Unit] = [ConstraintUnit(text=SECOND, source_seqs=[9])]
    embedder = Scripted({FIRST, SECOND})
    vectors = await unit_embeddings(embedder, units, earlier)
    assert vectors is not None and set(vectors) == {FIRST, SECOND}
    state = merge(earlier, units, embeddings=vectors, semantic_threshold=0.82)
    assert [c.text for c in state.constraints] == [FIRST]
    assert state.constraints[0].source_seqs == [1, 9]
    # Without vectors the two stay apart: exact keys only.
    assert len(merge(earlier, units).constraints) == 2


async def test_different_figures_are_never_the_same_item() -> None:
    a, b = "Spend at most 300 on the venue.", "Spend at most 450 on the venue."
    units: list[Unit] = [
        ConstraintUnit(text=a, source_seqs=[1]),
        ConstraintUnit(text=b, source_seqs=[2]),
    ]
    vectors = await unit_embeddings(Scripted({a, b}), units, TaskState())
    state = merge(TaskState(), units, embeddings=vectors)
    assert [c.text for c in state.constraints] == [a, b]


async def test_no_embedder_or_a_failing_one_loses_nothing() -> None:
    units: list[Unit] = [
        ConstraintUnit(text=FIRST, source_seqs=[1]),
        ConstraintUnit(text=SECOND, source_seqs=[2]),
    ]
    assert await unit_embeddings(None, units, TaskState()) is None
    assert await unit_embeddings(Down(), units, TaskState()) is None
    assert len(merge(TaskState(), units, embeddings=None).constraints) == 2

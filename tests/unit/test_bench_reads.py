"""bench.hotpaths_reads: reads ranked by how many reads of the same user turn came first."""

from __future__ import annotations

from bench.hotpaths_reads import reads_per_user_turn


def test_reads_are_ranked_after_the_latest_user_turn() -> None:
    session = [
        {"role": "system"},
        {"role": "assistant"},  # a greeting: the first read, before any user turn
        {"role": "user"},
        {"role": "assistant"},  # 1st read of this user turn
        {"role": "tool"},
        {"role": "assistant"},  # 2nd
        {"role": "tool"},
        {"role": "assistant"},  # 3rd: the only one a memory-block cache could answer
        {"role": "user"},
        {"role": "assistant"},  # 1st of the next user turn
    ]
    r = reads_per_user_turn([session])
    assert (r["reads"], r["user_turns"]) == (5, 2)
    assert (r["first_reads"], r["second_reads"], r["third_or_later_reads"]) == (3, 1, 1)
    assert r["cache_hit_upper_bound"] == 0.2

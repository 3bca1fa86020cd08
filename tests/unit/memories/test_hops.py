"""The names a second (multi-hop) search round is seeded with."""

from __future__ import annotations

from app.memories.hops import names, seed_terms


def test_names_are_capitalised_words_inside_a_sentence_and_numbers() -> None:
    text = "Priya: Yesterday we flew to Lisbon with Marco. It cost 240 euros in 2022!"
    # The speaker prefix and sentence-initial words ("Yesterday", "It") are not names.
    assert names(text) == ["Lisbon", "Marco", "240", "2022"]


def test_acronyms_and_lowercase_words_are_not_names() -> None:
    assert names("user: i asked the NASA team about the dinner") == []


def test_seeds_are_new_names_from_the_best_hits_first_without_the_speakers() -> None:
    hits = [
        "Priya: After the move I joined the choir in Porto.",
        "Tomas: Priya, did you like Porto? I loved Braga more.",
        "Priya: Tomas, the concert is at Casa da Musica.",
    ]
    seeds = seed_terms("Where did Priya move to?", hits, limit=3)
    assert seeds == ["porto", "braga", "casa"]  # no speaker, nothing the query has


def test_no_names_no_seeds() -> None:
    assert seed_terms("我上周买了什么", ["用户: 我买了一本书"], limit=4) == []

"""``gates.Gated`` answers exactly what the pattern (behind its hint) answers.

Every ``Gated`` the extractor holds is checked against the plain search it replaces
(``hint.search(text.lower()) and pattern.search(text)``) on sentences of its own
words, on generated text built from its literals, and on the letters ``re.IGNORECASE``
equates with ASCII ones. The requirements it reads from a pattern must hold for every
match; a requirement that one match does not meet (a gate that is not implied) would
make ``matches`` say no where the pattern says yes.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import re
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import app.compression.extract as extract
from app.compression.extract import deferral, gates, sentence
from app.compression.extract.gates import LEXICON, Gated, Trie, requirements, split_alternatives

from ..test_pattern_cost import CONTENT_LIMIT, cost, hostile_inputs


def _modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"{extract.__name__}.{info.name}")
        for info in pkgutil.iter_modules(extract.__path__)
    ]


def _instances() -> dict[str, Gated]:
    """Every ``Gated`` a module of the extractor holds, alone or in a tuple (of
    ``Gated``, or of (name, ``Gated``) pairs)."""
    found: dict[str, Gated] = {}
    for module in _modules():
        short = module.__name__.rsplit(".", 1)[-1]
        for name, value in vars(module).items():
            if isinstance(value, Gated):
                found[f"{short}.{name}"] = value
            elif isinstance(value, tuple):
                for i, item in enumerate(value):
                    item = item[1] if isinstance(item, tuple) and len(item) == 2 else item
                    if isinstance(item, Gated):
                        found[f"{short}.{name}[{i}]"] = item
    return found


def _tries() -> dict[str, Trie]:
    """Every ``Trie`` a module of the extractor holds (the families' hints)."""
    return {
        f"{module.__name__.rsplit('.', 1)[-1]}.{name}": value
        for module in _modules()
        for name, value in vars(module).items()
        if isinstance(value, Trie)
    }


GATED = _instances()
NAMES = sorted(GATED)
TRIES = _tries()

SENTENCES = [
    "Let me think about it and get back to you tomorrow.",
    "I'll check with my wife first.",
    "Well see.",  # no apostrophe: the hint never held "well see", so it is no deferral
    "We'll see.",
    "Shelve the bookcase order for now.",
    "这个我再想想",
    "等张经理点头了再说",
    "Never deploy on Fridays!",
    "you must not exceed the budget of $500",
    "只能用 CPU",
    "The meeting is on March 3rd, 2024 at 10am.",
    "Book it for next Tuesday, ¥3000 max.",
    "I prefer an aisle seat if possible.",
    "We decided to go with the blue one instead of the red.",
    "I'm blocked by the missing API key.",
    "IMPORTANT: do not email the client.",
    "Nothing to see here, just chatting about the weather.",
    # What re.IGNORECASE equates with ASCII letters but lower() does not line up with.
    "I'll thınk about it.",
    "I'll thınk about it tomorrow.",
    "You muſt not do that.",
    "Let me aſk my manager first.",
    "İ'LL THİNK ABOUT İT",
    "Dotted İ then we'll see",
    "ſtill undeciDED",
]


def _plain(gated: Gated, text: str) -> bool:
    hinted = gated.hint is None or gated.hint.search(text.lower()) is not None
    return hinted and gated.pattern.search(text) is not None


def test_the_extractor_holds_gated_patterns() -> None:
    assert {"deferral._DEFERRAL_GATED", "patterns.CONSTRAINT_GATED", "entities.DATE_GATED"} <= set(
        GATED
    )
    # Most alternatives have requirements: a gate that never gates would be no faster.
    for name, gated in GATED.items():
        assert len(gated.always) < len(gated.parts), name


@pytest.mark.parametrize("name", NAMES)
def test_same_answer_as_the_pattern_on_sentences(name: str) -> None:
    gated = GATED[name]
    for text in SENTENCES:
        assert gated.matches(text) == _plain(gated, text), (name, text)
        assert gated.matches(text, text.lower()) == _plain(gated, text), (name, text)


def _words(gated: Gated) -> list[str]:
    words = sorted({w for need in gated.needs for strings in need for w in strings})
    return [*words, *(w.upper() for w in words[:40]), " ", ",", ".", "?", "İ", "ı", "ſ", "K"]


@pytest.mark.parametrize("name", NAMES)
def test_same_answer_as_the_pattern_on_text_of_its_words(name: str) -> None:
    gated = GATED[name]
    alphabet = st.sampled_from(_words(gated))

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.lists(st.one_of(alphabet, st.text(max_size=3)), max_size=12))
    def check(parts: list[str]) -> None:
        text = " ".join(parts)
        assert gated.matches(text) == _plain(gated, text)
        for i in gated.candidates(text.lower()) if text.lower().isascii() else ():
            assert gated.parts[i].pattern in split_alternatives(gated.pattern.pattern)

    check()


@pytest.mark.parametrize("name", NAMES)
def test_same_answer_from_the_lexicon_of_a_sentence_read(name: str) -> None:
    """Asked about the sentence the lexicon read (its lower case, the same string),
    a ``Gated`` answers from the words found in it: the same answer, the same match."""
    gated = GATED[name]
    alphabet = st.sampled_from(_words(gated))

    def same(text: str) -> None:
        LEXICON.read(text)
        low = LEXICON.lower(text)
        assert LEXICON.found(low) is not None
        assert gated.matches(text) == gated.matches(text, low) == _plain(gated, text)
        assert gated.candidates(low) == _candidates_by_search(gated, low)
        found, plain = gated.search(text, low), gated.pattern.search(text)
        assert (found and found.span()) == (plain and plain.span())
        assert gated.possible(text, low) or plain is None

    for text in SENTENCES:
        same(text)

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(st.lists(st.one_of(alphabet, st.text(max_size=3)), max_size=12))
    def check(parts: list[str]) -> None:
        same(" ".join(parts))

    check()


def _candidates_by_search(gated: Gated, low: str) -> list[int]:
    return [
        i
        for i, need in enumerate(gated.needs)
        if all(any(w in low for w in strings) for strings in need)
    ]


@pytest.mark.parametrize("name", sorted(TRIES))
def test_a_trie_says_whether_a_word_occurs_the_same_way_everywhere(name: str) -> None:
    """``search`` (the ASCII words' trie in ASCII text) and ``occurs`` (from the
    lexicon, for a sentence read; by search otherwise) agree with a plain look-up."""
    hint = TRIES[name]
    words = sorted(hint.words)
    alphabet = st.sampled_from([*words, *(w.upper() for w in words[:20]), " ", "x", "中", "İ"])

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(st.lists(st.one_of(alphabet, st.text(max_size=3)), max_size=10))
    def check(parts: list[str]) -> None:
        text = " ".join(parts)
        low = text.lower()
        plain = any(w in low for w in hint.words)
        assert (hint.search(low) is not None) == plain
        assert (hint.full.search(low) is not None) == plain
        assert hint.occurs(low) == plain  # not read: searched
        LEXICON.read(text)
        assert hint.occurs(LEXICON.lower(text)) == plain

    check()


def test_the_lexicon_answers_only_for_the_sentence_read() -> None:
    """By identity: an equal string built apart is searched (with the same answer)."""
    read = "Let me think about it."
    LEXICON.read(read)
    assert LEXICON.found(LEXICON.lower(read)) == frozenset({"let me", "think", "."} & LEXICON.words)
    equal = "".join(["Let me ", "think about it."])
    assert LEXICON.lower(equal) == LEXICON.lower(read)
    assert LEXICON.found(LEXICON.lower(equal)) is None
    assert LEXICON.found(read.lower()) is None
    text = "Never deploy on Fridays!"
    LEXICON.read(text)
    found = LEXICON.found(LEXICON.lower(text))
    assert found is not None and {"never", "deploy"} & found == {"never"}
    LEXICON.read("an other")
    assert LEXICON.found(LEXICON.lower(text)) is None


def test_a_word_registered_later_rebuilds_the_lexicon() -> None:
    Trie(["zqxjv-word"])
    text = "it says zqxjv-word here"
    LEXICON.read(text)
    assert "zqxjv-word" in (LEXICON.found(LEXICON.lower(text)) or ())


@pytest.mark.parametrize("which", ["full", "ascii"])
def test_the_lexicon_tries_are_linear_on_hostile_input(which: str) -> None:
    """The harness of tests/unit/test_pattern_cost, on the lexicon's tries (built on
    first use, so not among the module-level patterns it discovers)."""
    full, ascii_only, _ = LEXICON.scan()
    pattern = full if which == "full" else ascii_only
    worst = max(cost(pattern, text, 1.0) for text in hostile_inputs(pattern, 4_000).values())
    assert worst < 1.0
    for text in hostile_inputs(pattern, 4_000).values():
        big = (text * (CONTENT_LIMIT // max(len(text), 1) + 1))[:CONTENT_LIMIT]
        assert cost(pattern, big, 5.0) < math.inf


def test_the_families_read_through_the_lexicon_are_those_of_a_sentence() -> None:
    """A sentence's hints answer from the lexicon once it was read (``sentence._lower``
    hands back the string it answers for)."""
    text = "IMPORTANT: do not email the client."
    apart = sentence.emphasized("".join(["IMPORTANT: do not ", "email the client."]), False)
    LEXICON.read(text)
    assert sentence._lower(text) is LEXICON.lower(text)
    assert sentence.emphasized(text, turn_emphasized=False) is apart is True


@pytest.mark.parametrize("name", NAMES)
def test_every_match_meets_its_alternatives_requirements(name: str) -> None:
    """The requirements are implied: wherever an alternative matches (aligned text),
    each of its sets has a string in the lower-cased text."""
    gated = GATED[name]
    for part, need in zip(gated.parts, gated.needs, strict=True):
        for strings in need:
            for w in sorted(strings)[:8]:
                text = f"x {w} y"
                if part.search(text) is not None:
                    low = text.lower()
                    assert all(any(s in low for s in other) for other in need), (part, w)


def test_requirements_of_simple_forms() -> None:
    assert requirements(r"\bhold (?:off|fire)\b", re.I) == (frozenset({"hold off", "hold fire"}),)
    # A gap splits a requirement in two: both must occur.
    assert set(requirements(r"\bpark\b.{0,40}\bfor now\b", re.I)) == {
        frozenset({"park"}),
        frozenset({"for now"}),
    }
    # An optional part requires nothing; an alternative that requires nothing makes
    # the whole requirement-free.
    assert requirements(r"(?:maybe )?", 0) == ()
    assert requirements(r"abc|\d+", 0) == ()
    assert requirements(r"TBD", 0) == (frozenset({"tbd"}),)
    # A cased letter outside ASCII is not read (its lower case may not line up).
    assert requirements(r"Σ", 0) == ()


def test_split_alternatives_keeps_groups_and_classes_whole() -> None:
    assert split_alternatives(r"a|(b|c)|[|]|\||d") == ["a", "(b|c)", "[|]", r"\|", "d"]
    assert split_alternatives(r"[]|]x|y") == ["[]|]x", "y"]


def test_a_backreference_keeps_the_pattern_whole() -> None:
    gated = Gated(re.compile(r"(a)\1|b"))
    assert len(gated.parts) == 1
    assert gated.matches("aa") and gated.matches("b") and not gated.matches("a")


def test_the_hint_still_vetoes_a_match_it_never_allowed() -> None:
    """ "Well see." matches an alternative of ``DEFERRAL`` ("we'?ll see") but holds no
    word of ``HINT_DEFERRAL``: the extractor never read it as a deferral, and still
    does not. A ``Gated`` that skipped the hint after a match would say yes."""
    assert deferral.DEFERRAL.search("Well see.") is not None
    assert deferral.HINT_DEFERRAL.search("well see.") is None
    assert not deferral.is_deferral("Well see.")
    assert deferral.is_deferral("We'll see.")
    assert not all(deferral._DEFERRAL_GATED.implies)


def test_letters_re_equates_with_the_requirements_lower_to_them() -> None:
    """Soundness of reading requirements in ``text.lower()``: every character that
    ``re.IGNORECASE`` takes for a requirement's character lowers to it, but for the
    three ``matches`` sends to the whole pattern; and only "İ" lowers to two."""
    chars = sorted({ch for g in GATED.values() for n in g.needs for s in n for w in s for ch in w})
    every = "".join(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF)
    lower_changes_length = [ch for ch in every if len(ch.lower()) != 1]
    assert lower_changes_length == ["\u0130"]
    for ch in chars:
        for other in re.findall(re.escape(ch), every, re.IGNORECASE):
            assert other.lower() == ch or other in "İıſ", (ch, other)
    assert set(gates._UNALIGNED) == {"\u0307", "ı", "ſ"}

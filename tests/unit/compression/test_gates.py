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
import pkgutil
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import app.compression.extract as extract
from app.compression.extract import deferral, gates
from app.compression.extract.gates import Gated, requirements, split_alternatives


def _instances() -> dict[str, Gated]:
    found: dict[str, Gated] = {}
    for info in pkgutil.iter_modules(extract.__path__):
        module = importlib.import_module(f"{extract.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, Gated):
                found[f"{info.name}.{name}"] = value
    return found


GATED = _instances()
NAMES = sorted(GATED)

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

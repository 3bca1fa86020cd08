"""Whether a long alternation matches, asked of the few alternatives that can.

``re`` tries every alternative of ``a|b|c…`` at every position of the text; the
deferral cues and the like are seventy alternatives long and most start with ``\\b``,
which defeats the engine's first-character skip, so a sentence cost about as much as
seventy searches. Most sentences contain none of the words any alternative needs.

``Gated(pattern)`` answers ``pattern.search(text) is not None`` exactly, cheaper:

* the pattern's source is split into its top-level alternatives, each compiled alone
  with the same flags (``a|b`` matches somewhere exactly when ``a`` or ``b`` does);
* each alternative's *requirements* are read from its parsed form: sets of literal
  strings of which the text must contain one for the alternative to match (the
  literals it must consume, contiguous across zero-width assertions), in lower case;
* one search of a trie of each alternative's most telling set, from each position
  it hits, names the candidate alternatives; only those whose every set occurs in
  the lower-cased text are searched, and only until one matches.

A requirement is implied by the alternative by construction (``_required``); text
whose lower case would not line up with it character by character (it holds
``İ``, ``ı`` or ``ſ``, which ``re.IGNORECASE`` equates with ASCII letters) takes the
whole pattern instead. Where the parse is not understood, an alternative has no
requirement and is always a candidate: slower, never wrong.
"""

from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Iterable
from typing import Any

# The parser of ``re`` (private, untyped): without it every alternative is a candidate.
try:
    _c: Any = importlib.import_module("re._constants")
    _sre_parse: Any = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - another Python
    _sre_parse = None

_LIMIT = 64  # strings a set may hold before it is cut (cross products grow fast)
_SMALL_CLASS = 8
_SMALL_REPEAT = 3
# Characters whose lower case does not line up with what re.IGNORECASE equates them
# with: "İ".lower() is two characters; "ı" and "ſ" match "i" and "s" but stay themselves.
_UNALIGNED = ("\u0307", "ı", "ſ")

Req = tuple[frozenset[str], ...]  # every set must have one of its strings in the text
# Every pattern a ``Gated`` searches besides its own (its alternatives, its trie of
# keys): module-level, so that the hostile-input harness (tests/unit/test_pattern_cost)
# finds and runs them too.
SEARCHED: list[re.Pattern[str]] = []
_NOTHING = re.compile(r"(?!)")  # the trie of no words


def split_alternatives(source: str) -> list[str]:
    """The top-level alternatives of a pattern's source (``a|(b|c)|d`` → a, (b|c), d)."""
    out: list[str] = []
    depth, start, i, in_class = 0, 0, 0, False
    while i < len(source):
        ch = source[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            i += 1 if source[i + 1 : i + 2] == "^" else 0
            i += 1 if source[i + 1 : i + 2] == "]" else 0  # "[]…]": a literal "]"
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append(source[start:i])
            start = i + 1
        i += 1
    out.append(source[start:])
    return out


# A reference to a group by number would name another group once the alternatives
# are apart.
_BACKREFERENCE = re.compile(r"\\[1-9]|\(\?P=|\(\?\(")


def _alternatives(pattern: re.Pattern[str]) -> list[str]:
    """The alternatives to search apart, or the whole pattern when that is not safe."""
    if _BACKREFERENCE.search(pattern.pattern) is not None:
        return [pattern.pattern]
    return split_alternatives(pattern.pattern)


def _literal(code: int) -> str | None:
    """A character a literal stands for in lower-cased text, if it lines up: ASCII
    (what re.IGNORECASE equates with it lowers to it, ``_UNALIGNED`` aside) or caseless."""
    ch = chr(code)
    if ch.isascii() or ch.lower() == ch == ch.upper():
        return ch.lower()
    return None


def _exact(op: Any, av: Any) -> set[str] | None:
    """Every string ``op`` can match (lower case), when there are few; else None."""
    if op is _c.LITERAL:
        ch = _literal(av)
        return None if ch is None else {ch}
    if op is _c.IN:
        chars: set[str] = set()
        for item_op, item in av:
            ch = _literal(item) if item_op is _c.LITERAL else None
            if ch is None:
                return None
            chars.add(ch)
        return chars if len(chars) <= _SMALL_CLASS else None
    if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
        return {""}  # zero-width: what is consumed either side is contiguous
    if op is _c.SUBPATTERN:
        return _seq_exact(av[3])
    if op is _c.ATOMIC_GROUP:
        return _seq_exact(av)
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        low, high, sub = av
        each = _seq_exact(sub) if high <= _SMALL_REPEAT else None
        if each is None:
            return None
        out: set[str] = set()
        run = {""}
        for k in range(high + 1):
            out |= run if k >= low else set()
            run = {a + b for a in run for b in each}
            if len(out) > _LIMIT or len(run) > _LIMIT:
                return None
        return out
    if op is _c.BRANCH:
        union: set[str] = set()
        for alt in av[1]:
            each = _seq_exact(alt)
            if each is None:
                return None
            union |= each
        return union if len(union) <= _LIMIT else None
    return None


def _seq_exact(seq: Any) -> set[str] | None:
    strings = {""}
    for op, av in seq:
        each = _exact(op, av)
        if each is None:
            return None
        strings = {a + b for a in strings for b in each}
        if len(strings) > _LIMIT:
            return None
    return strings


def _inner(op: Any, av: Any) -> list[frozenset[str]]:
    """What a node whose strings are not few still requires."""
    if op is _c.SUBPATTERN:
        return _required(av[3])
    if op is _c.ATOMIC_GROUP:
        return _required(av)
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
        return _required(av[2]) if av[0] >= 1 else []
    if op is _c.BRANCH:
        # One set of each alternative: one of their strings occurs, whichever matched.
        picked: list[frozenset[str]] = []
        for alt in av[1]:
            sets = _required(alt)
            if not sets:
                return []
            picked.append(_telling(sets))
        return [frozenset().union(*picked)]
    return []


def _required(seq: Any) -> list[frozenset[str]]:
    """Sets of strings a match of ``seq`` consumes one of each of: the runs of nodes
    whose strings are few, joined, and what the other nodes require."""
    sets: list[frozenset[str]] = []
    run = {""}
    for op, av in seq:
        each = _exact(op, av)
        if each is not None:
            joined = {a + b for a in run for b in each}
            if len(joined) > _LIMIT:
                sets += [frozenset(run)] if "" not in run else []
                joined = set(each)
            run = joined
            continue
        sets += [frozenset(run)] if "" not in run else []
        run = {""}
        sets += _inner(op, av)
    sets += [frozenset(run)] if "" not in run else []
    return list(dict.fromkeys(sets))


def _weight(s: str) -> int:
    return sum(2 if ord(ch) >= 0x2E80 else 1 for ch in s)  # a CJK character says more


def _telling(sets: list[frozenset[str]]) -> frozenset[str]:
    """The set least likely to occur by chance: its shortest string longest."""
    return max(sets, key=lambda s: (min(map(_weight, s)), -len(s)))


def requirements(source: str, flags: int) -> Req:
    """What text must contain (lower-cased) for ``source`` to match: () when unknown."""
    if _sre_parse is None:  # pragma: no cover
        return ()
    try:
        parsed = _sre_parse.parse(source, flags)
    except Exception:  # a form this reader does not know: no requirement
        return ()
    sets = _required(list(parsed))
    return tuple(sorted(sets, key=lambda s: (min(map(_weight, s)), -len(s)), reverse=True))


_Trie = dict[str, "_Trie"]


def _trie_pattern(words: Iterable[str], *, longest: bool = False) -> re.Pattern[str]:
    """The trie of ``words``: it finds the shortest word at a position (a word that
    extends a shorter one is dropped), or with ``longest`` the longest (a word that a
    longer one extends is kept, tried after it)."""
    root: _Trie = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def branch(node: _Trie) -> str:
        parts = [re.escape(ch) + branch(child) for ch, child in sorted(node.items()) if ch]
        if "" in node:
            return "(?:" + "|".join(parts) + "|)" if longest and parts else ""
        return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"

    return re.compile(branch(root)) if root else _NOTHING


class Trie:
    """Finds the shortest of a set of literals starting at a position (``search``, as
    ``re.Pattern.search``), built as a trie: a flat alternation of a hundred literals
    tries every branch at every position; the trie tries one branch per first
    character, then one per next character (and ``re`` skips a position on its first
    character). A word that extends a shorter one is dropped: the shorter one
    already matches there.

    ``re`` still tries each first character's branch in turn at every position it
    does not skip, Chinese ones included: in ASCII text (most text, and
    ``str.isascii`` is a flag) only the ASCII words can occur, and a trie of those
    alone is searched, a third cheaper for the long bilingual sets.
    """

    __slots__ = ("ascii", "full", "words")

    def __init__(self, words: Iterable[str]):
        self.words = frozenset(words)
        ascii_words = {w for w in self.words if w.isascii()}
        self.full = _trie_pattern(self.words)
        self.ascii = self.full if ascii_words == self.words else _trie_pattern(ascii_words)
        SEARCHED.extend((self.full, self.ascii))
        LEXICON.add(self.words)

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        return (self.ascii if text.isascii() else self.full).search(text, pos)

    def occurs(self, low: str) -> bool:
        """Whether one of the words occurs in ``low`` (``search(low) is not None``),
        from the lexicon when ``low`` is the sentence it read."""
        found = LEXICON.found(low)
        if found is None:
            return self.search(low) is not None
        return not self.words.isdisjoint(found)


class Lexicon:
    """The words of every ``Trie`` that occur in the sentence being read, found in one
    pass.

    The sentence rules ask each family's hint, and each ``Gated`` its keys, of the same
    sentence in turn: a dozen trie searches of one sentence. ``read(sentence)`` finds
    with one trie of all their words (ASCII ones only in ASCII text) those that occur
    in it; until the next ``read``, a ``Trie`` or a ``Gated`` asked about that
    sentence's lower case (the same string object, ``lower``) answers from the set.
    Exact: the words that occur at a position are the longest one the trie finds
    there and the words it extends. Any other text is searched as before.

    What it holds for the sentence is one tuple, replaced whole: a thread that reads
    another sentence meanwhile only sends this one's questions to the tries.
    """

    def __init__(self) -> None:
        self.words: set[str] = set()
        self._scan: tuple[re.Pattern[str], re.Pattern[str], dict[str, frozenset[str]]] | None
        self._scan = None
        self._read: tuple[str, str, frozenset[str]] = ("", "", frozenset())

    def add(self, words: Iterable[str]) -> None:
        if not self.words.issuperset(words):
            self.words.update(words)
            self._scan = None  # built again on the next read

    def scan(self) -> tuple[re.Pattern[str], re.Pattern[str], dict[str, frozenset[str]]]:
        """The tries of every word and of the ASCII ones, and each word's prefixes
        among the words."""
        if self._scan is None:
            words = frozenset(self.words)
            full = _trie_pattern(words, longest=True)
            ascii_only = _trie_pattern((w for w in words if w.isascii()), longest=True)
            prefixes = {w: frozenset(w[:n] for n in range(1, len(w) + 1)) & words for w in words}
            SEARCHED.extend((full, ascii_only))
            self._scan = (full, ascii_only, prefixes)
        return self._scan

    def read(self, sentence: str) -> None:
        """Find the words that occur in ``sentence`` (lower-cased)."""
        full, ascii_only, prefixes = self.scan()
        low = sentence.lower()
        pattern = ascii_only if low.isascii() else full
        found: set[str] = set()
        m = pattern.search(low)
        while m is not None:
            found |= prefixes[m.group()]
            m = pattern.search(low, m.start() + 1)
        self._read = (sentence, low, frozenset(found))

    def lower(self, text: str) -> str:
        """``text.lower()``: for the sentence read, the string the lexicon answers for."""
        read = self._read
        return read[1] if read[0] is text else text.lower()

    def found(self, low: str) -> frozenset[str] | None:
        """The words that occur in ``low`` if it is the sentence read, else None."""
        read = self._read
        return read[2] if read[1] is low else None


LEXICON = Lexicon()


def trie(words: Iterable[str]) -> Trie:
    """A ``Trie`` of ``words``."""
    return Trie(words)


def _implies(needs: tuple[Req, ...], hint: Trie | None) -> tuple[bool, ...]:
    """For each alternative, whether its match implies ``hint``: one of its required
    sets has a hint word in each of its strings."""
    return tuple(
        hint is None or any(all(hint.search(w) for w in strings) for strings in need)
        for need in needs
    )


class Gated:
    """``pattern.search(text) is not None``, asked only of the alternatives whose
    literals ``text`` contains (module docstring).

    ``hint``: a cheaper pattern the caller searched in the lower-cased text first
    (``literal_hint``): the answer is still ``hint`` and ``pattern``, but the hint is
    searched only once an alternative matched, and not at all when that alternative
    requires a string that holds a hint word (its match implies the hint).
    """

    def __init__(self, pattern: re.Pattern[str], hint: Trie | None = None):
        self.pattern, self.hint = pattern, hint
        sources = _alternatives(pattern)
        self.parts = tuple(re.compile(s, pattern.flags) for s in sources)
        self.needs = tuple(requirements(s, pattern.flags) for s in sources)
        if len(self.parts) > 1 and any(p.flags != pattern.flags for p in self.parts):
            self.parts, self.needs = (pattern,), ((),)  # a global inline flag: whole
        self.implies = _implies(self.needs, hint)
        self.always = frozenset(i for i, need in enumerate(self.needs) if not need)
        keys = {w for need in self.needs if need for w in need[0]}
        self.keys = Trie(keys)
        SEARCHED.extend(self.parts)
        # The lexicon's set: each telling string names the alternatives it tells.
        self.by_word: dict[str, list[int]] = {}
        for i, need in enumerate(self.needs):
            for w in need[0] if need else ():
                self.by_word.setdefault(w, []).append(i)
        # The trie finds the shortest key at a position: each names the alternatives
        # one of whose telling strings starts with it.
        self.by_key: dict[str, list[int]] = {key: [] for key in keys}
        for i, need in enumerate(self.needs):
            for key in {w[:n] for w in (need[0] if need else ()) for n in range(1, len(w) + 1)}:
                if key in self.by_key:
                    self.by_key[key].append(i)

    def behind(self, hint: Trie) -> Gated:
        """The same alternatives behind ``hint`` (nothing compiled again)."""
        other = copy.copy(self)
        other.hint = hint
        other.implies = _implies(self.needs, hint)
        return other

    def patterns(self) -> tuple[re.Pattern[str], ...]:
        """The patterns searched besides ``pattern`` (for the hostile-input harness)."""
        return (*self.parts, self.keys.full, self.keys.ascii)

    def candidates(self, low: str) -> list[int]:
        """The alternatives whose every required set occurs in ``low``, in order."""
        present = LEXICON.found(low)
        if present is not None:
            # Those whose telling set occurs; their other sets are looked up.
            found = set(self.always)
            for w in present:
                found.update(self.by_word.get(w, ()))
            needs = self.needs
            return [i for i in sorted(found) if all(any(w in low for w in s) for s in needs[i][1:])]
        m = self.keys.search(low)
        if m is None and not self.always:
            return []  # most texts: one search of the trie
        found = set(self.always)
        while m is not None and len(found) < len(self.parts):
            found.update(self.by_key[m.group()])
            m = self.keys.search(low, m.start() + 1)
        needs = self.needs
        return [
            i for i in sorted(found) if all(any(w in low for w in strings) for strings in needs[i])
        ]

    def possible(self, text: str, low: str | None = None) -> bool:
        """Whether ``pattern`` can match ``text`` at all (the hint aside): False when no
        alternative's literals occur, and then ``pattern`` finds nothing in it."""
        low = LEXICON.lower(text) if low is None else low
        if not low.isascii() and any(ch in low for ch in _UNALIGNED):
            return True
        return bool(self.candidates(low))

    def search(self, text: str, low: str | None = None) -> re.Match[str] | None:
        """``pattern.search(text)``, not run where it cannot match (the hint aside)."""
        return self.pattern.search(text) if self.possible(text, low) else None

    def matches(self, text: str, low: str | None = None) -> bool:
        """``hint.search(low) and pattern.search(text)``; ``low`` is ``text.lower()``."""
        low = LEXICON.lower(text) if low is None else low
        if not low.isascii() and any(ch in low for ch in _UNALIGNED):
            return self._hinted(low) and self.pattern.search(text) is not None
        for i in self.candidates(low):
            if self.parts[i].search(text) is not None:
                return self.implies[i] or self._hinted(low)
        return False

    def _hinted(self, low: str) -> bool:
        return self.hint is None or self.hint.occurs(low)

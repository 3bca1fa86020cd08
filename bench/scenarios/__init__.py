"""The scenarios of the recall benchmark's sessions, as data: one JSON file each.

``common.json`` names the scenarios in the order sessions cycle through them,
holds the conversational phrasing every scenario shares (how a setting is given
and changed, acknowledgements, chit-chat, sign-offs) and the shared value
fragments; ``<key>.json`` holds one scenario (a travel booking, an ML training
run, …): what the user asks and states, the tools the agent calls with their
arguments and results. Texts come in English and Chinese (``{"en": …, "zh": …}``);
random parts of arguments and results are value specs (``values.py``).

The files are read and checked once, on first use; a misspelt field fails there.
``bench/sessions.py`` plays them as sessions. Like the sessions, the files are
benchmark data: never copy their text into rules or unit tests
(``tests/test_no_copied_phrasing.py`` checks).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bench.scenarios.values import Spec, resolve

Language = Literal["en", "zh"]
Text = dict[Language, str]  # one text in both languages
Texts = dict[Language, tuple[str, ...]]
Args = dict[str, Any]  # a tool call's arguments, or a JSON result, as is

FOLDER = Path(__file__).resolve().parent


class _Data(BaseModel):
    """Read-only, and a field the model does not know is an error, not ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Constraint(_Data):
    en: str
    zh: str
    emphasized: bool


class HighStakes(_Data):
    text: Text
    phrase: Text  # what the state must show


class Param(_Data):
    """A setting the user gives, then changes 1–3 times (values in that order)."""

    name: Text
    values: Texts


class Act(_Data):
    """A tool call whose result carries an id: a planted completed action."""

    ask: Text
    tool: str
    args: Spec  # ``{"$i": …}`` is the act's position in the session
    id_key: str
    id_prefix: str  # empty: a six-character record locator
    result: Spec


class Fail(_Data):
    """A call that fails, then succeeds with other arguments."""

    ask: Text
    tool: str
    bad_args: Args
    error: Args | str
    error_phrase: str  # what the Failed line must show
    explain: Text  # the assistant's note before the retry
    good_args: Args
    id_key: str
    id_prefix: str


class Flaky(_Data):
    """A call that hits a transient error and succeeds on an identical retry."""

    ask: Text
    tool: str
    args: Args
    error: Args
    id_key: str
    id_prefix: str


class Pending(_Data):
    """An agent question the user defers: it must stay pending."""

    question: Text
    deferral: Text
    phrase: Text


class Answered(_Data):
    """An agent question the user answers: it must not stay pending."""

    question: Text
    answer: Text
    phrase: Text


class Todo(_Data):
    text: Text
    phrase: Text
    prerequisite: Text  # the missing prerequisite, named


class Lookup(_Data):
    """Filler: a user asks, the agent calls a search tool, a long list comes back."""

    ask: Text
    tool: str
    args: Spec
    row: Spec  # ``{"$i": …}`` is the row's position in the list


class QA(_Data):
    """Filler: task talk, a user question and the assistant's answer."""

    question: Text
    answer: Text


class Scenario(_Data):
    key: str
    system: Text
    goal: Text
    constraints: tuple[Constraint, ...]
    high_stakes: tuple[HighStakes, ...]
    params: tuple[Param, ...]
    acts: tuple[Act, ...]
    fail: Fail
    flaky: Flaky
    pending: tuple[Pending, ...]
    answered: tuple[Answered, ...]
    todo: Todo
    lookups: tuple[Lookup, ...]
    qa: tuple[QA, ...]


class Phrasing(_Data):
    """What every scenario's conversation shares; templates use ``str.format`` fields."""

    set: Texts  # a setting first given: {name}, {v}
    change: Texts  # a setting changed: {name}, {old}, {v}
    ack: Texts  # the assistant acknowledges a statement
    chitchat: Texts  # noise: must not reach the task state
    chitchat_reply: Texts
    sign_off: Texts
    acks: Texts  # the user's short acknowledgements
    done_say: Text  # {tool}, {id}
    found_say: Text  # {n}


class Common(_Data):
    scenarios: tuple[str, ...]  # file names, in the order sessions cycle through them
    phrasing: Phrasing
    fragments: dict[str, Spec]  # shared value specs, ``{"$ref": name}``


def data_files() -> list[Path]:
    """Every data file, for checks that read the corpus text."""
    return sorted(FOLDER.glob("*.json"))


def _read(path: Path, fragments: dict[str, Spec]) -> Any:
    return resolve(json.loads(path.read_text(encoding="utf-8")), fragments)


@functools.cache
def common() -> Common:
    raw = json.loads((FOLDER / "common.json").read_text(encoding="utf-8"))
    return Common.model_validate(resolve(raw, raw.get("fragments", {})))


@functools.cache
def scenarios() -> tuple[Scenario, ...]:
    """The scenarios in ``common.json``'s order."""
    fragments = common().fragments
    loaded = []
    for key in common().scenarios:
        scenario = Scenario.model_validate(_read(FOLDER / f"{key}.json", fragments))
        if scenario.key != key:
            raise ValueError(f"{key}.json holds scenario {scenario.key!r}")
        loaded.append(scenario)
    return tuple(loaded)

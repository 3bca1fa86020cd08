"""Deterministic long agent sessions with planted ground truth, in English and Chinese.

``generate(seed, index, turns, language)`` builds one session: a scenario
(travel, ML training, ETL, support refund, deploy, medical appointment; data
files in ``bench/scenarios/``) played as an agent would post it — user
requests, tool calls with JSON arguments and long JSON results, failures and
retries, chit-chat, acknowledgements — with the items a compressor must keep
*planted* at random places:

* ``constraint`` — a rule the user stated (some ``emphasized``);
* ``action_done`` — a successful tool call; recalled by a "Done"/"已完成" line
  naming the tool and an id from its result (for a tool named as a lookup, its
  "Looked up"/"已查询" line also counts: reads are grouped per tool and keep the ids
  their newest call obtained; a write shown as looked up does not);
* ``action_failed`` — a failed call retried with other arguments; a
  "Failed"/"失败" line naming the tool and the error;
* ``parameter_current`` / ``parameter_superseded_marked`` — a setting changed
  1–3 times: its latest value shown as current, and no older value shown as
  current (only as "(was …)"/"(原为 …)", or not at all);
* ``pending`` — an assistant confirmation the user left unanswered, under the
  "Pending:"/"待确认：" marker;
* ``high_stakes`` — allergies, medication, card and account numbers;
* ``todo`` — a next step with a missing prerequisite ("(missing: …)"/"（缺少：…）");

plus ``answered`` questions (which must *not* stay pending) and ``noise``:
chit-chat phrases that must not reach the task state. Every planted item
carries the ids of the raw messages that state it, so baselines that keep raw
turns (full history, truncation) are judged on the same items.

The same (seed, index, turns, language) always gives the same session: all
randomness comes from one ``random.Random`` seeded with a string.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from bench.recall.rendered import DONE, FAILED, PENDING, READ
from bench.scenarios import (
    Act,
    Answered,
    Constraint,
    Fail,
    Flaky,
    HighStakes,
    Language,
    Param,
    Pending,
    Scenario,
    Text,
    Todo,
    common,
    scenarios,
)
from bench.scenarios.values import evaluate

Kind = Literal[
    "constraint",
    "action_done",
    "action_failed",
    "parameter_current",
    "parameter_superseded_marked",
    "pending",
    "high_stakes",
    "todo",
    "answered",
]
RECALL_KINDS: tuple[Kind, ...] = (
    "constraint",
    "action_done",
    "action_failed",
    "parameter_current",
    "parameter_superseded_marked",
    "pending",
    "high_stakes",
    "todo",
)
# Planted items land in the first 90% of a session; the tail is ordinary traffic.
PLANT_SPAN = 0.9
# Tools whose first word says they only read: their successful call may be recalled by
# a "Looked up" line (reads are grouped per tool, with the ids the newest call
# obtained). A write shown as looked up is not recalled as done. The benchmark's own
# list, independent of the compressor's classification.
LOOKUP_VERBS = frozenset(
    {"get", "list", "search", "find", "lookup", "check", "fetch", "query", "load", "read"}
)
MIN_TURNS = 50
MAX_TURNS = 500


@dataclass(frozen=True)
class Planted:
    """One item the context must carry, and how to recognise it."""

    kind: Kind
    key: str
    text: str  # the source sentence (or tool call), for reports
    turn_ids: tuple[str, ...]  # raw messages that state it
    planted_at: int  # index of the first of them in the session
    phrases: tuple[str, ...] = ()  # all on one line of the state
    markers: tuple[str, ...] = ()  # that line starts with one of these
    name: str = ""  # parameters: the setting's name
    value: str = ""  # parameters: the current value
    old_values: tuple[str, ...] = ()  # parameters: superseded values, oldest first
    prerequisite: str = ""  # todos: the missing prerequisite, named


@dataclass(frozen=True)
class Noise:
    phrase: str
    turn_id: str


@dataclass
class Session:
    session_id: str
    user_id: str
    language: Language
    scenario: str
    seed: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    planted: list[Planted] = field(default_factory=list)
    noise: list[Noise] = field(default_factory=list)

    def ground_truth(self) -> dict[str, Any]:
        """The planted items and noise, JSON-ready."""
        return {
            "planted": [asdict(p) for p in self.planted],
            "noise": [asdict(n) for n in self.noise],
        }


SCENARIOS: tuple[Scenario, ...] = scenarios()
_SAY = common().phrasing


def _details(rng: random.Random) -> dict[str, Any]:
    """Padding every action's result carries (an audit trail, terms)."""
    return dict(evaluate(common().fragments["details"], rng))


# ----------------------------------------------------------------- building


class _Builder:
    """Appends messages with ids and records what was planted where."""

    def __init__(self, session: Session, rng: random.Random):
        self.s = session
        self.rng = rng
        self.lang: Language = session.language
        self.calls = 0
        self.keys: dict[str, int] = {}

    def pick(self, text: Text) -> str:
        return text[self.lang]

    def add(self, role: str, content: str | None, **extra: Any) -> str:
        mid = f"{self.s.session_id}-m{len(self.s.messages):04d}"
        message: dict[str, Any] = {"role": role, "content": content, "id": mid, **extra}
        self.s.messages.append(message)
        return mid

    def index(self, mid: str) -> int:
        return int(mid.rsplit("-m", 1)[1])

    def key(self, kind: str) -> str:
        self.keys[kind] = self.keys.get(kind, 0) + 1
        return f"{kind}-{self.keys[kind]}"

    def plant(self, kind: Kind, text: str, ids: list[str], **kw: Any) -> None:
        self.s.planted.append(
            Planted(
                kind=kind,
                key=self.key(kind),
                text=text,
                turn_ids=tuple(ids),
                planted_at=self.index(ids[0]),
                **kw,
            )
        )

    def call(self, tool: str, args: dict[str, Any]) -> tuple[str, str]:
        self.calls += 1
        cid = f"call_{self.calls}"
        fn = {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}
        mid = self.add(
            "assistant", None, tool_calls=[{"id": cid, "type": "function", "function": fn}]
        )
        return cid, mid

    def result(self, cid: str, payload: Any) -> str:
        text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
        return self.add("tool", text, tool_call_id=cid)

    def succeed(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        id_key: str,
        id_prefix: str,
        result: Callable[[], dict[str, Any]],
        describe: Callable[[str], str],
    ) -> None:
        """A call whose result carries a new id, and the agent saying so: a planted
        completed action. ``result`` draws the result's other fields after the id;
        ``describe`` is the report text, given the id."""
        cid, call = self.call(tool, args)
        ident = self.new_id(id_prefix)
        res = self.result(cid, {id_key: ident, **result(), "details": _details(self.rng)})
        self.add("assistant", _SAY.done_say[self.lang].format(tool=tool, id=ident))
        markers = DONE + READ if tool.split("_", 1)[0] in LOOKUP_VERBS else DONE
        self.plant(
            "action_done", describe(ident), [call, res], phrases=(tool, ident), markers=markers
        )

    def new_id(self, prefix: str) -> str:
        if not prefix:  # airline record locators: six letters and digits
            return "".join(self.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
        return f"{prefix}{self.rng.randint(10_000, 99_999)}"


Beat = Callable[[_Builder], None]


def _constraint_beat(constraint: Constraint) -> Beat:
    def beat(b: _Builder) -> None:
        text = constraint.en if b.lang == "en" else constraint.zh
        extra = {"emphasized": True} if constraint.emphasized else {}
        mid = b.add("user", text, **extra)
        b.add("assistant", b.rng.choice(_SAY.ack[b.lang]))
        b.plant("constraint", text, [mid], phrases=(text.rstrip(".。"),))

    return beat


def _high_stakes_beat(item: HighStakes) -> Beat:
    def beat(b: _Builder) -> None:
        text, phrase = b.pick(item.text), b.pick(item.phrase)
        mid = b.add("user", text)
        b.add("assistant", b.rng.choice(_SAY.ack[b.lang]))
        b.plant("high_stakes", text, [mid], phrases=(phrase,))

    return beat


def _param_beats(param: Param, changes: int, rng: random.Random, lang: Language) -> list[Beat]:
    values = param.values[lang][: changes + 1]
    name = param.name[lang]
    said: list[str] = []

    def step(i: int) -> Beat:
        def beat(b: _Builder) -> None:
            templates = _SAY.set[b.lang] if i == 0 else _SAY.change[b.lang]
            template = b.rng.choice(templates)
            text = template.format(name=name, v=values[i], old=values[i - 1] if i else "")
            if b.lang == "en":
                text = text[0].upper() + text[1:]
            said.append(b.add("user", text))
            b.add("assistant", b.rng.choice(_SAY.ack[b.lang]))
            if i == len(values) - 1:
                first = said[-1]
                for kind in ("parameter_current", "parameter_superseded_marked"):
                    b.plant(
                        kind,
                        text,
                        [first],
                        name=name,
                        value=values[-1],
                        old_values=tuple(values[:-1]),
                    )

        return beat

    return [step(i) for i in range(len(values))]


def _act_beat(act: Act, i: int) -> Beat:
    def beat(b: _Builder) -> None:
        b.add("user", b.pick(act.ask))
        args = evaluate(act.args, b.rng, i)
        shown = json.dumps(args, ensure_ascii=False)
        b.succeed(
            act.tool,
            args,
            id_key=act.id_key,
            id_prefix=act.id_prefix,
            result=lambda: dict(evaluate(act.result, b.rng)),
            describe=lambda ident: f"{act.tool}({shown}) → {act.id_key}={ident}",
        )

    return beat


def _fail_beat(fail: Fail) -> Beat:
    def beat(b: _Builder) -> None:
        b.add("user", b.pick(fail.ask))
        cid, call = b.call(fail.tool, fail.bad_args)
        res = b.result(cid, fail.error)
        b.add("assistant", b.pick(fail.explain))
        text = f"{fail.tool}({json.dumps(fail.bad_args)}) → {fail.error_phrase}"
        b.plant(
            "action_failed",
            text,
            [call, res],
            phrases=(fail.tool, fail.error_phrase),
            markers=FAILED,
        )
        b.succeed(
            fail.tool,
            fail.good_args,
            id_key=fail.id_key,
            id_prefix=fail.id_prefix,
            result=lambda: {"status": "ok"},
            describe=lambda ident: (
                f"{fail.tool}({json.dumps(fail.good_args)}) → {fail.id_key}={ident}"
            ),
        )

    return beat


def _flaky_beat(flaky: Flaky) -> Beat:
    def beat(b: _Builder) -> None:
        b.add("user", b.pick(flaky.ask))
        cid, _ = b.call(flaky.tool, flaky.args)
        b.result(cid, flaky.error)
        b.succeed(
            flaky.tool,
            flaky.args,
            id_key=flaky.id_key,
            id_prefix=flaky.id_prefix,
            result=lambda: {"status": "ok"},
            describe=lambda ident: (
                f"{flaky.tool}({json.dumps(flaky.args)}) failed once, then → {ident}"
            ),
        )

    return beat


def _pending_beat(item: Pending) -> Beat:
    def beat(b: _Builder) -> None:
        question = b.pick(item.question)
        mid = b.add("assistant", question)
        reply = b.add("user", b.pick(item.deferral))
        b.plant(
            "pending",
            question,
            [mid, reply],
            phrases=(b.pick(item.phrase).rstrip("?？"),),
            markers=PENDING,
        )

    return beat


def _answered_beat(item: Answered) -> Beat:
    def beat(b: _Builder) -> None:
        question = b.pick(item.question)
        mid = b.add("assistant", question)
        answer = b.add("user", b.pick(item.answer))
        b.add("assistant", b.rng.choice(_SAY.ack[b.lang]))
        b.plant(
            "answered",
            question,
            [mid, answer],
            phrases=(b.pick(item.phrase),),
            markers=PENDING,
        )

    return beat


def _todo_beat(todo: Todo) -> Beat:
    def beat(b: _Builder) -> None:
        text = b.pick(todo.text)
        mid = b.add("user", text)
        b.add("assistant", b.rng.choice(_SAY.ack[b.lang]))
        b.plant(
            "todo",
            text,
            [mid],
            phrases=(b.pick(todo.phrase),),
            markers=("- ",),
            prerequisite=b.pick(todo.prerequisite),
        )

    return beat


# -- filler


def _chitchat(b: _Builder, unused: list[str]) -> None:
    if not unused:
        unused.extend(_SAY.chitchat[b.lang])
        b.rng.shuffle(unused)
    text = unused.pop()
    mid = b.add("user", text)
    b.s.noise.append(Noise(text, mid))
    reply = b.rng.choice(_SAY.chitchat_reply[b.lang])
    b.s.noise.append(Noise(reply, b.add("assistant", reply)))


def _lookup(b: _Builder, scenario: Scenario) -> None:
    lookup = b.rng.choice(scenario.lookups)
    b.add("user", b.pick(lookup.ask))
    cid, _ = b.call(lookup.tool, evaluate(lookup.args, b.rng))
    n = b.rng.choice([4, 8, 12, 20, 30])
    b.result(cid, {"results": [evaluate(lookup.row, b.rng, i) for i in range(n)], "count": n})
    b.add("assistant", _SAY.found_say[b.lang].format(n=n))
    if b.rng.random() < 0.35:
        text = b.rng.choice(_SAY.sign_off[b.lang])
        b.s.noise.append(Noise(text, b.add("assistant", text)))


def _qa(b: _Builder, scenario: Scenario) -> None:
    qa = b.rng.choice(scenario.qa)
    b.add("user", b.pick(qa.question))
    b.add("assistant", b.pick(qa.answer))


def _ack(b: _Builder) -> None:
    b.add("user", b.rng.choice(_SAY.acks[b.lang]))


def _filler(b: _Builder, scenario: Scenario, unused: list[str]) -> None:
    roll = b.rng.random()
    if roll < 0.25:
        _chitchat(b, unused)
    elif roll < 0.70:
        _lookup(b, scenario)
    elif roll < 0.85:
        _qa(b, scenario)
    else:
        _ack(b)


# ----------------------------------------------------------------- the generator


def _beats(scenario: Scenario, rng: random.Random, lang: Language, turns: int) -> list[Beat]:
    """Planted beats in a random order that keeps each parameter's changes in sequence."""
    single: list[Beat] = [_constraint_beat(c) for c in scenario.constraints]
    single += [_high_stakes_beat(h) for h in scenario.high_stakes]
    single += [_fail_beat(scenario.fail), _flaky_beat(scenario.flaky)]
    single += [_pending_beat(p) for p in scenario.pending]
    single += [_answered_beat(a) for a in scenario.answered]
    single.append(_todo_beat(scenario.todo))
    # Longer sessions do more work: one more completed action per ~40 turns.
    n_acts = 2 + turns // 40
    single += [_act_beat(scenario.acts[i % len(scenario.acts)], i) for i in range(n_acts)]
    keyed: list[tuple[float, Beat]] = [(rng.random(), beat) for beat in single]
    for param in scenario.params:
        steps = _param_beats(param, rng.randint(1, 3), rng, lang)
        positions = sorted(rng.random() for _ in steps)
        keyed += list(zip(positions, steps, strict=True))
    keyed.sort(key=lambda kb: kb[0])
    return [beat for _, beat in keyed]


def generate(
    *, seed: int | str, index: int, turns: int, language: Language, scenario: str | None = None
) -> Session:
    """One session of about ``turns`` messages (a tool exchange is never cut)."""
    if not MIN_TURNS <= turns <= MAX_TURNS:
        raise ValueError(f"turns must be within {MIN_TURNS}–{MAX_TURNS}, got {turns}")
    tag = f"{seed}:{index}:{turns}:{language}:{scenario}"
    rng = random.Random(tag)
    chosen = (
        next(s for s in SCENARIOS if s.key == scenario)
        if scenario
        else SCENARIOS[index % len(SCENARIOS)]
    )
    session = Session(
        session_id=f"recall-{index:03d}-{language}-{chosen.key}",
        user_id=f"recall-user-{index:03d}",
        language=language,
        scenario=chosen.key,
        seed=tag,
    )
    b = _Builder(session, rng)
    b.add("system", b.pick(chosen.system))
    b.add("user", b.pick(chosen.goal))
    b.add("assistant", b.rng.choice(_SAY.ack[language]))
    beats = _beats(chosen, rng, language, turns)
    unused: list[str] = []
    span = int(turns * PLANT_SPAN)
    # Spread the planted beats over the span: each beat is preceded by filler until
    # the session reaches its share of the span (a beat is ~2–7 messages).
    for i, beat in enumerate(beats):
        target = 3 + (span - 3) * i / max(1, len(beats))
        target -= rng.uniform(0, (span - 3) / max(1, len(beats)) * 0.8)
        while len(session.messages) < target:
            _filler(b, chosen, unused)
        beat(b)
    while len(session.messages) < turns:
        _filler(b, chosen, unused)
    return session


def plan_sessions(
    *, seed: int | str, count: int, min_turns: int, max_turns: int
) -> list[tuple[int, int, Language]]:
    """(index, turns, language) of ``count`` sessions: lengths spread evenly, languages
    alternating, so every run covers short and long sessions in both languages."""
    if count < 1:
        return []
    step = (max_turns - min_turns) / max(1, count - 1)
    lengths = [round(min_turns + i * step) for i in range(count)]
    random.Random(f"{seed}:lengths").shuffle(lengths)
    languages: list[Language] = ["en", "zh"]
    return [(i, lengths[i], languages[i % 2]) for i in range(count)]

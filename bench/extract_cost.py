"""The rule extractor over real text: what it says (a digest to compare two codes) and
what it costs (CPU per 1,000 characters of user text).

    python -m bench.extract_cost --dump FILE.json
    python -m bench.extract_cost --time [--rounds N] [--against CHECKOUT]

The text: every user turn of the shared corpora (``/work/shared/data``: agent-sessions,
tau airline, LoCoMo's utterances, LongMemEval oracle and S) and of ``bench.sessions``
(seed 7, 24 sessions of 50–500 messages), and those corpora's sessions whole.

``--dump`` writes, per corpus, the count of records and a sha256 over them:

- ``turns``: each distinct user turn read alone, as the live notes read it
  (``extract_units`` against ``live_notes._WITH_LATEST``): every unit, not only the
  kinds ``turn_units`` keeps (the compression reads the rest);
- ``kept``: ``live_notes.turn_units`` of the same turns;
- ``slices``: each session in slices of 16 messages, each read against the state the
  slices before it merged (``merge``), as a compression reads a session: every role,
  the tool results, the cross-turn rules.

Two codes say the same thing when their dumps are equal.

``--time`` times ``extract_units`` over the distinct user turns (no memo), in ms per
1,000 characters, once per round. With ``--against CHECKOUT`` the same process also
imports the ``app`` package of another checkout (a second copy of the modules, under
their own names) and alternates the two, A B A B, round by round: the figures to
compare two codes on a shared machine. Each round records the 1-minute load.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.sessions import generate, plan_sessions

DATA = Path("/work/shared/data")
SLICE = 16
Message = dict[str, Any]


def _messages(raw: Sequence[Message]) -> list[Message]:
    keep = ("role", "content", "tool_calls", "tool_call_id", "name")
    return [{k: m[k] for k in keep if m.get(k) is not None} for m in raw]


def corpora() -> dict[str, list[list[Message]]]:
    """Sessions (messages in the OpenAI shape) by corpus."""
    out: dict[str, list[list[Message]]] = {}
    agent = json.loads((DATA / "agent-sessions/dev.json").read_text())
    out["agent-sessions"] = [_messages(s["messages"]) for s in agent]
    tau = json.loads((DATA / "tau/airline_dev.json").read_text())
    out["tau"] = [_messages(s["traj"]) for s in tau]
    locomo = json.loads((DATA / "locomo/locomo_dev.json").read_text())
    # LoCoMo is two people talking: each one's utterances read as a user's.
    out["locomo"] = [
        [{"role": "user", "content": u["text"]} for u in talk]
        for s in locomo
        for key, talk in s["conversation"].items()
        if key.startswith("session_") and isinstance(talk, list)
    ]
    for name in ("oracle", "s"):
        lme = json.loads((DATA / f"longmemeval/longmemeval_{name}_dev.json").read_text())
        out[f"longmemeval-{name}"] = [
            _messages(session) for q in lme for session in q["haystack_sessions"]
        ]
    plan = plan_sessions(seed=7, count=24, min_turns=50, max_turns=500)
    out["bench.sessions"] = [
        _messages(generate(seed=7, index=i, turns=n, language=lang).messages) for i, n, lang in plan
    ]
    return out


def user_texts(sessions: Sequence[Sequence[Message]]) -> list[str]:
    """The distinct user turns, in order of first appearance."""
    seen: dict[str, None] = {}
    for session in sessions:
        for m in session:
            if m["role"] == "user" and m.get("content"):
                seen.setdefault(m["content"], None)
    return list(seen)


class Code:
    """The extractor's entry points of one checkout's ``app`` package."""

    def __init__(self, modules: dict[str, ModuleType]):
        self.rules = modules["app.compression.extract.rules"]
        self.live_notes = modules["app.compression.live_notes"]
        self.state = modules["app.compression.state"]
        self.merge = modules["app.compression.merge"].merge
        self.turn = modules["app.core.turns"].TurnView

    def alone(self, text: str) -> list[Any]:
        turn = self.turn(seq=0, role="user", content=text)
        units: list[Any] = self.rules.extract_units([turn], self.live_notes._WITH_LATEST)
        return units

    def dump(self, units: Sequence[Any]) -> str:
        return json.dumps(self.state.dump_units(list(units)), ensure_ascii=False, sort_keys=True)

    def slices(self, session: Sequence[Message]) -> Iterator[str]:
        state = self.state.TaskState()
        turns = [self.turn(seq=i, **m) for i, m in enumerate(session, 1)]
        for start in range(0, len(turns), SLICE):
            part = turns[start : start + SLICE]
            units = self.rules.extract_units(part, state)
            yield self.dump(units)
            state = self.merge(state, units, through_seq=part[-1].seq)
        yield state.model_dump_json()


_MODULES = (
    "app.compression.extract.rules",
    "app.compression.live_notes",
    "app.compression.state",
    "app.compression.merge",
    "app.core.turns",
)


def load(checkout: Path | None) -> Code:
    """The ``app`` package of ``checkout`` (None: the one on the path), imported as a
    copy of its own: the modules already imported are set aside and put back after."""
    if checkout is None:
        return Code({name: importlib.import_module(name) for name in _MODULES})
    kept = {k: v for k, v in sys.modules.items() if k == "app" or k.startswith("app.")}
    for k in kept:
        del sys.modules[k]
    sys.path.insert(0, str(checkout))
    try:
        return Code({name: importlib.import_module(name) for name in _MODULES})
    finally:
        sys.path.remove(str(checkout))
        for k in [k for k in sys.modules if k == "app" or k.startswith("app.")]:
            del sys.modules[k]
        sys.modules.update(kept)


def _digest(records: Iterator[str]) -> dict[str, Any]:
    sha, count = hashlib.sha256(), 0
    for record in records:
        sha.update(record.encode())
        sha.update(b"\n")
        count += 1
    return {"records": count, "sha256": sha.hexdigest()}


def dump(code: Code, data: dict[str, list[list[Message]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, sessions in data.items():
        texts = user_texts(sessions)
        units = [code.alone(t) for t in texts]
        kept = [code.live_notes.turn_units(t) for t in texts]
        out[name] = {
            "turns": _digest(code.dump(u) for u in units),
            "units": sum(map(len, units)),
            "kept": _digest(code.dump(k) for k in kept),
            "kept_units": sum(map(len, kept)),
            "slices": _digest(r for s in sessions for r in code.slices(s)),
        }
    return out


def cost(code: Code, texts: Sequence[str]) -> float:
    """CPU ms per 1,000 characters of ``extract_units`` over ``texts``, one pass."""
    began = time.process_time()
    for text in texts:
        code.alone(text)
    spent = time.process_time() - began
    return spent * 1000 / (sum(map(len, texts)) / 1000)


def rounds(codes: dict[str, Code], texts: Sequence[str], n: int) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for i in range(n):
        order = list(codes) if i % 2 == 0 else list(reversed(codes))
        for label in order:
            figure = cost(codes[label], texts)
            runs.append({"round": i, "code": label, "ms_per_kchar": figure, "load1": _load()})
            print(json.dumps(runs[-1]), flush=True)
    return runs


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.extract_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dump", type=Path, help="write the digests of what it says here")
    parser.add_argument("--time", action="store_true", help="time it over the user turns")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--against", type=Path, help="another checkout, timed A B A B")
    parser.add_argument("--out", type=Path, help="write the timings here (JSON)")
    args = parser.parse_args(argv)
    data = corpora()
    code = load(None)
    if args.dump:
        args.dump.write_text(json.dumps(dump(code, data), indent=1) + "\n")
    if args.time:
        codes: dict[str, Code] = {"this": code}
        if args.against:
            codes["against"] = load(args.against)
        texts = [t for sessions in data.values() for t in user_texts(sessions)]
        runs = rounds(codes, texts, args.rounds)
        _summary(runs)
        if args.out:
            args.out.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


def _summary(runs: list[dict[str, Any]]) -> None:
    by: dict[str, list[float]] = {}
    for r in runs:
        by.setdefault(r["code"], []).append(r["ms_per_kchar"])
    for label, figures in by.items():
        print(f"{label}: " + " ".join(f"{f:.3f}" for f in figures) + " ms / 1,000 chars")
    if len(by) == 2:
        this, other = by["this"], by["against"]
        wins = sum(a < b for a, b in zip(this, other, strict=False))
        ratios = [a / b for a, b in zip(this, other, strict=False)]
        print(f"this / against: {' '.join(f'{r:.3f}' for r in ratios)}; this lower in {wins}")


if __name__ == "__main__":
    raise SystemExit(main())

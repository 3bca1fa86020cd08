"""Value specs: how the scenario files say "a random number here", evaluated with a seeded RNG.

A spec is plain JSON: scalars, lists and objects stand for themselves (objects and
lists are evaluated member by member, in order), except an object with a single
``$``-key, an operator:

=====================================  ===============================================
``{"$randint": [a, b]}``               ``rng.randint(a, b)``
``{"$uniform": [a, b]}``               ``rng.uniform(a, b)``
``{"$round": [spec, digits]}``         ``round(value, digits)``
``{"$choice": [x, y, …]}``             ``rng.choice`` of the (evaluated) options
``{"$sample": [[x, y, …], k]}``        ``rng.sample(options, k)``
``{"$chance": p}``                     ``rng.random() < p``
``{"$either": [p, a, b]}``             ``a if rng.random() < p else b``
``{"$randbits": n}``                   ``rng.getrandbits(n)``
``{"$repeat": [text, count]}``         ``text * count``
``{"$list": [count, item]}``           ``[item for _ in range(count)]``, each drawn anew
``{"$format": [fmt, spec, …]}``        ``fmt.format(*values)``
``{"$i": {"mul": m, "add": a,          ``a + m * (i % n)`` of the position ``i`` (the
"mod": n}}``                           n-th act of a session, the n-th row of a result)
``{"$ref": name}``                     a shared fragment; replaced when the files load
=====================================  ===============================================

Random draws happen in document order, so a spec draws from the RNG exactly as
the Python expression it stands for: the sessions are reproducible from their seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

Spec = Any


def _index(args: Mapping[str, int], i: int) -> int:
    mod = args.get("mod")
    return args.get("add", 0) + args.get("mul", 1) * (i % mod if mod else i)


_Op = Callable[[Any, random.Random, int], Any]
_OPS: dict[str, _Op] = {
    "$randint": lambda a, rng, i: rng.randint(*(evaluate(x, rng, i) for x in a)),
    "$uniform": lambda a, rng, i: rng.uniform(*(evaluate(x, rng, i) for x in a)),
    "$round": lambda a, rng, i: round(evaluate(a[0], rng, i), a[1]),
    "$choice": lambda a, rng, i: evaluate(rng.choice(a), rng, i),
    "$sample": lambda a, rng, i: rng.sample(a[0], a[1]),
    "$chance": lambda a, rng, i: rng.random() < a,
    "$either": lambda a, rng, i: evaluate(a[1] if rng.random() < a[0] else a[2], rng, i),
    "$randbits": lambda a, rng, i: rng.getrandbits(a),
    "$repeat": lambda a, rng, i: evaluate(a[0], rng, i) * evaluate(a[1], rng, i),
    "$list": lambda a, rng, i: [evaluate(a[1], rng, i) for _ in range(evaluate(a[0], rng, i))],
    "$format": lambda a, rng, i: a[0].format(*(evaluate(x, rng, i) for x in a[1:])),
    "$i": lambda a, rng, i: _index(a, i),
}


def _operator(spec: Spec) -> str | None:
    if isinstance(spec, dict) and len(spec) == 1:
        (key,) = spec
        if key.startswith("$"):
            return str(key)
    return None


def evaluate(spec: Spec, rng: random.Random, i: int = 0) -> Any:
    """The value a spec stands for; ``i`` is the position ``{"$i": …}`` refers to."""
    op = _operator(spec)
    if op is not None:
        return _OPS[op](spec[op], rng, i)
    if isinstance(spec, dict):
        return {k: evaluate(v, rng, i) for k, v in spec.items()}
    if isinstance(spec, list):
        return [evaluate(v, rng, i) for v in spec]
    return spec


def resolve(spec: Spec, fragments: Mapping[str, Spec]) -> Spec:
    """``spec`` with every ``{"$ref": name}`` replaced by that fragment; unknown
    operators and names are refused here, when the files load, not mid-run."""
    op = _operator(spec)
    if op == "$ref":
        return resolve(fragments[spec[op]], fragments)
    if op is not None and op not in _OPS:
        raise ValueError(f"unknown operator {op!r} in {spec!r}")
    if isinstance(spec, dict):
        return {k: resolve(v, fragments) for k, v in spec.items()}
    if isinstance(spec, list):
        return [resolve(v, fragments) for v in spec]
    return spec

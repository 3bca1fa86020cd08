"""Assertions that cannot fail, and tests that assert nothing, are refused.

Ruff catches the simple shapes (SIM222 ``x or True``, PLW0129, PLR0124, B011, PT015);
this walks the test tree for what it cannot express: ``… or True`` around an
``await`` or a call, asserts on any constant, a disjunct that repeats an earlier
assert of the same test (``assert a`` then ``assert b or a``), and test functions
in which nothing asserts, directly or through the helpers they call.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# Tests whose check is not an assert statement, with what checks them.
NO_ASSERT_NEEDED = {
    # asyncio.wait_for(done.wait(), timeout=10) raises if NOTIFY never woke the worker.
    "test_notify_wakes_an_idle_worker",
    # check_messages raises on bad input: not raising is the check.
    "test_good_messages_pass",
}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(TESTS.rglob("*.py")):
        yield path, ast.parse(path.read_text(), filename=str(path))


def _called_names(node: ast.AST) -> set[str]:
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def _checks_directly(fn: Function) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Raise) and "AssertionError" in ast.dump(node):
            return True
    # pytest.raises / pytest.fail / schemathesis' call_and_validate are checks too.
    return bool(_called_names(fn) & {"raises", "fail", "call_and_validate"})


def asserting_functions(trees: list[ast.Module]) -> set[str]:
    """Names of functions in the test tree that assert, directly or through a callee."""
    functions = [n for tree in trees for n in ast.walk(tree) if isinstance(n, Function)]
    asserting = {fn.name for fn in functions if _checks_directly(fn)}
    calls = {fn.name: _called_names(fn) for fn in functions}
    changed = True
    while changed:
        changed = False
        for name, called in calls.items():
            if name not in asserting and called & asserting:
                asserting.add(name)
                changed = True
    return asserting


def _pure(node: ast.AST) -> bool:
    return not any(isinstance(n, ast.Call | ast.Await | ast.NamedExpr) for n in ast.walk(node))


def vacuous_asserts(fn: Function) -> Iterator[tuple[int, str]]:
    earlier: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Assert):
            continue
        test = node.test
        inner = test.operand if isinstance(test, ast.UnaryOp) else test
        if isinstance(inner, ast.Constant):
            yield node.lineno, "asserts a constant"
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
            if any(isinstance(v, ast.Constant) and v.value for v in test.values):
                yield node.lineno, "`or` a true constant: always passes"
            if any(ast.dump(v) in earlier for v in test.values):
                yield node.lineno, "a disjunct repeats an earlier assert: always passes"
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq | ast.Is | ast.GtE | ast.LtE)
            and ast.dump(test.left) == ast.dump(test.comparators[0])
            and _pure(test.left)
        ):
            yield node.lineno, "compares an expression with itself"
        earlier.add(ast.dump(test))


def test_no_assertion_can_only_pass() -> None:
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}: {why}"
        for path, tree in modules()
        for fn in ast.walk(tree)
        if isinstance(fn, Function)
        for line, why in vacuous_asserts(fn)
    ]
    assert found == []


def test_every_test_checks_something() -> None:
    parsed = list(modules())
    asserting = asserting_functions([tree for _, tree in parsed])
    silent = [
        f"{path.relative_to(TESTS.parent)}:{fn.lineno}: {fn.name}"
        for path, tree in parsed
        if path.name.startswith("test_")
        for fn in ast.walk(tree)
        if isinstance(fn, Function) and fn.name.startswith("test_")
        if fn.name not in asserting and fn.name not in NO_ASSERT_NEEDED
    ]
    assert silent == []


def test_the_checks_see_what_they_are_meant_to() -> None:
    """The walker itself, on code that must be flagged and code that must not."""
    bad = ast.parse(
        "async def test_x(w):\n"
        "    assert await w.run() is None or True\n"
        "    assert True\n"
        "    assert not 0\n"
        "    assert w.a >= 1\n"
        "    assert w.b or w.a >= 1\n"
        "    assert w.c == w.c\n"
    )
    [fn] = [n for n in bad.body if isinstance(n, Function)]
    assert [line for line, _ in vacuous_asserts(fn)] == [2, 3, 4, 6, 7]
    good = ast.parse(
        "def helper(x):\n    assert x\n"
        "def test_a():\n    helper(1)\n"
        "def test_b():\n    print(1)\n"
        "def test_c(w):\n    assert w.next() == w.next()\n"
    )
    assert asserting_functions([good]) == {"helper", "test_a", "test_c"}
    [fn_c] = [n for n in good.body if isinstance(n, Function) and n.name == "test_c"]
    assert list(vacuous_asserts(fn_c)) == []

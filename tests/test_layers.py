"""The layers of app/ hold (docs/decisions/0005-layers-and-sql-ownership.md).

Two gates run with the suite: the import contract in pyproject.toml (``lint-imports``:
each layer imports only from the layers below it, and no package imports in a circle),
and SQL only in ``app/stores`` (and the migrations).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
SQL_HOMES = (APP / "stores", APP / "migrations")

# A statement, not an English word: the keyword and what must follow it.
SQL = re.compile(
    r"\b(SELECT\s+[\w*(]|INSERT\s+INTO\s|UPDATE\s+\w+\s+(\w+\s+)?SET\s|DELETE\s+FROM\s"
    r"|CREATE\s+(TABLE|INDEX)\s|ALTER\s+TABLE\s)"
)
# What runs a statement: SQLAlchemy's execute family and asyncpg's fetch family.
RUNNERS = {"execute", "exec_driver_sql", "fetch", "fetchrow", "fetchval", "executemany"}


def test_import_contract() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def sql_in(path: Path) -> list[str]:
    """Where ``path`` holds a SQL statement or runs one, as ``file:line what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if SQL.search(node.value):
                found.append(f"{where} SQL text")
        elif isinstance(node, ast.ImportFrom) and node.module == "sqlalchemy":
            if any(alias.name == "text" for alias in node.names):
                found.append(f"{where} imports sqlalchemy.text")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in RUNNERS:
                found.append(f"{where} .{node.func.attr}()")
    return found


def test_sql_lives_only_in_stores() -> None:
    modules = [
        p for p in APP.rglob("*.py") if not any(p.is_relative_to(home) for home in SQL_HOMES)
    ]
    assert len(modules) > 40  # the walk found the package
    found = [f"{p.parent.relative_to(ROOT)}/{hit}" for p in modules for hit in sql_in(p)]
    assert found == [], "SQL belongs in app/stores:\n" + "\n".join(found)


def test_the_sql_check_sees_sql(tmp_path: Path) -> None:
    """The check above would notice a query, a text() import and a driver call."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from sqlalchemy import text\n"
        'Q = text("SELECT id FROM jobs WHERE id = :id")\n'
        "async def f(db):\n"
        '    return await db.fetchval("UPDATE sessions s SET x = 1")\n'
    )
    hits = sorted(hit.split(" ", 1)[1] for hit in sql_in(sample))
    assert hits == [".fetchval()", "SQL text", "SQL text", "imports sqlalchemy.text"]


# One owner per table: every statement that writes a table is in its owner's module.
OWNERS = {
    "users": "stores/sessions.py",
    "sessions": "stores/sessions.py",
    "turns": "stores/sessions.py",
    "task_states": "stores/compression.py",
    "compression_events": "stores/compression.py",
    "memories": "stores/memories.py",
    "memory_terms": "stores/memories.py",
    "memory_vectors": "stores/memories.py",
    "jobs": "stores/queue.py",
    "api_keys": "stores/api_keys.py",
    "tasks": "stores/tasks.py",
    "task_members": "stores/tasks.py",
    "task_events": "stores/tasks.py",
    "misses": "stores/misses.py",
    "sweeps": "stores/sweeps.py",
}
WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([a-z_]+)\b(?=[\s(])")


def writes_in(path: Path) -> set[str]:
    """The tables that SQL text in ``path`` writes."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        table
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for table in WRITE.findall(node.value)
    }


def test_every_table_has_one_owner() -> None:
    from app.stores.tables import metadata

    assert set(OWNERS) == set(metadata.tables), (
        "a table without an owner (or an owner of no table): name its store in OWNERS"
        " (docs/decisions/0005-layers-and-sql-ownership.md)"
    )
    writers: dict[str, set[str]] = {}
    for path in (APP / "stores").rglob("*.py"):
        for table in writes_in(path):
            writers.setdefault(table, set()).add(str(path.relative_to(APP)))
    assert set(writers) <= set(OWNERS), f"writes to unknown tables: {writers}"
    strays = {t: w for t, w in writers.items() if w != {OWNERS[t]}}
    assert strays == {}, f"tables written outside their owner: {strays}"


def test_the_owner_check_sees_writes(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'A = "INSERT INTO jobs (id) VALUES (1)"\n'
        'B = """UPDATE sessions s SET x = 1"""\n'
        'C = "DELETE FROM memories WHERE id = 1"\n'
        'D = "SELECT 1 FROM turns"\n'
        'E = "we update sessions when asked"\n'
    )
    assert writes_in(sample) == {"jobs", "sessions", "memories"}

"""The floors of docs/architecture.md hold: imports point down, and SQL stays in the store.

Every module of ``picobot`` is parsed (never run). :data:`FLOORS` lists the packages
(and top-level modules) from the top floor to the bottom one; a module may import its
own package and anything on a lower floor, never a floor above it, nor a neighbour on
its own floor (except :data:`SIDEWAYS`). Every package must have a floor, so a new one
is placed deliberately. Above the store (every floor but the store's and those below
it), a module is refused if it imports ``sqlite3`` or ``aiosqlite``, calls a raw
query method (``execute``, ``fetchall`` ...) or holds SQL in a string literal: data
goes through the store's repositories, where pagination and listing live.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import picobot

PACKAGE = Path(picobot.__file__).parent
TRANSPORT_FLOORS = ("channels", "admin", "dashboard", "mcp")

FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor.split())
    for floor in (
        "__main__",  # python -m picobot
        "cli",  # starts everything
        "channels admin dashboard mcp",  # front ends: parse, authenticate, render
        "runtime logsetup",  # builds the parts once
        "commands",  # the chat's front end over the services
        "services",  # each operation a front end offers, once
        "kernel",  # the turn and its prompt
        "tasks",  # background jobs
        "privacy",  # purges, redaction, export rendering
        "tools",  # the model's tools
        "memory",  # learned memory: prompts and parsing
        "text recall",  # token counting, untrusted data; recall by meaning (query side)
        "store",  # SQLite: the only floor with SQL
        "llm",  # model providers
        "access auth ratelimit",  # who may do what
        "config backoff metrics logsafe registry shapes numbers",  # settings, leaf helpers
        "messages errors __init__",  # the contracts everything shares
    )
)
"""Packages and top-level modules of ``picobot``, top floor first."""
SIDEWAYS = frozenset({("dashboard", "admin")})
"""Imports across one floor that are allowed: the dashboard rides on the admin API (its
keys, its failed-login budget, its export stream)."""
SQL_FLOORS_FROM = next(i for i, floor in enumerate(FLOORS) if "store" in floor)
"""The store's floor: SQL is allowed there and below, never above."""
KNOWN_SQL: dict[str, str] = {
    "kernel/prompt/retriever.py": "imports sqlite3 to annotate the connection of a db.read "
    "callback (it runs no SQL of its own)",
}
"""Modules above the store allowed one finding, and why."""

DRIVERS = frozenset({"sqlite3", "aiosqlite"})
RAW_QUERY_METHODS = frozenset(
    {"execute", "executemany", "executescript", "fetchone", "fetchall", "execute_write"}
)
# Upper-case SQL only: "DELETE /api/v1/..." (an HTTP method) or prose must not match.
SQL = re.compile(
    r"\bSELECT\b|\b(INSERT|REPLACE)\s+(OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b"
    r"|\bDELETE\s+FROM\b|\b(CREATE|DROP|ALTER)\s+(VIRTUAL\s+)?(TABLE|INDEX|TRIGGER|VIEW)\b"
    r"|\bPRAGMA\b|\bBEGIN\s+(IMMEDIATE|EXCLUSIVE|DEFERRED|TRANSACTION)\b|\bVACUUM\b"
)


def violations(source: str) -> list[str]:
    """What in ``source`` reaches below the store's repositories, one line per finding."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            names = []
        found.extend(
            f"line {line}: imports {name}" for name in names if name.split(".")[0] in DRIVERS
        )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in RAW_QUERY_METHODS
            # A class's own method of that name (PrivacyController.execute) is no query.
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "self")
        ):
            found.append(f"line {line}: calls .{node.func.attr}()")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = SQL.search(node.value)
            if match:
                found.append(f"line {line}: SQL in a string ({match.group(0)!r})")
    return found


def transport_modules() -> list[Path]:
    """Every Python module of the channel and admin floors."""
    return sorted(p for floor in TRANSPORT_FLOORS for p in (PACKAGE / floor).rglob("*.py"))


def test_the_scan_sees_every_floor() -> None:
    modules = {p.relative_to(PACKAGE).parts[0] for p in transport_modules()}
    assert modules == set(TRANSPORT_FLOORS)


@pytest.mark.parametrize(
    "source",
    [
        "import sqlite3",
        "import aiosqlite as db",
        "from sqlite3 import Connection",
        "async def f(db):\n    await db.fetchall('x')",
        "def f(conn):\n    conn.execute(q)",
        "Q = 'SELECT id FROM sessions'",
        "Q = f'SELECT {cols} FROM messages'",
        "Q = 'select 1' if x else 'DELETE FROM messages WHERE id = ?'",
        "Q = ('UPDATE sessions SET last_active = ?'\n     ' WHERE id = ?')",
        "Q = 'INSERT OR IGNORE INTO t VALUES (?)'",
        "Q = 'PRAGMA foreign_keys = ON'",
    ],
)
def test_the_scan_finds_sql(source: str) -> None:
    assert violations(source)


@pytest.mark.parametrize(
    "source",
    [
        '"""``DELETE /api/v1/users/{user_id}/memories/{key}``: 204."""',
        "msg = 'select the session to update from the list'",
        "async def f(r):\n    await r.content.read(10)\n    await r.write(b'')",
        "from picobot.store.conversation.sessions import SessionRepo",
    ],
)
def test_the_scan_passes_plain_code(source: str) -> None:
    assert violations(source) == []


@pytest.mark.parametrize("module", transport_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_channels_and_admin_hold_no_sql(module: Path) -> None:
    assert violations(module.read_text(encoding="utf-8")) == []


def all_modules() -> list[Path]:
    """Every Python module of ``picobot``."""
    return sorted(PACKAGE.rglob("*.py"))


def unit_of(module: Path) -> str:
    """The package (or top-level module) ``module`` belongs to: its floor's entry."""
    return module.relative_to(PACKAGE).parts[0].removesuffix(".py")


def floor_of(unit: str) -> int:
    """The floor of a package or top-level module (0 is the top)."""
    for number, floor in enumerate(FLOORS):
        if unit in floor:
            return number
    raise AssertionError(f"picobot/{unit} has no floor in FLOORS: place it")


def _unit_named(name: str) -> str:
    """``name`` as ``from picobot import name`` means it: a module, else a name that
    ``picobot/__init__.py`` defines (``__version__``)."""
    is_module = (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()
    return name if is_module else "__init__"


def imported_units(source: str, package: str = "picobot") -> list[tuple[int, str]]:
    """(line, unit) of every ``picobot`` import in ``source``, type-only imports too."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == package:  # from picobot import x: a module, or a name of
                names = [f"{package}.{_unit_named(alias.name)}" for alias in node.names]
        else:
            continue
        found.extend(
            (node.lineno, name.split(".")[1]) for name in names if name.startswith(f"{package}.")
        )
    return found


def upward_imports(unit: str, source: str) -> list[str]:
    """The imports of ``source`` (a module of ``unit``) that point up or sideways."""
    here = floor_of(unit)
    bad: list[str] = []
    for line, target in imported_units(source):
        if target == unit or (unit, target) in SIDEWAYS:
            continue
        there = floor_of(target)
        if there < here:
            bad.append(f"line {line}: imports picobot.{target} (a floor above)")
        elif there == here:
            bad.append(f"line {line}: imports picobot.{target} (beside it on its floor)")
    return bad


def test_every_package_has_a_floor() -> None:
    units = {unit_of(p) for p in all_modules()}
    placed = set().union(*FLOORS)
    assert units <= placed, f"no floor for: {sorted(units - placed)}"
    assert sum(len(f) for f in FLOORS) == len(placed), "a unit is on two floors"


@pytest.mark.parametrize(
    ("unit", "source"),
    [
        ("store", "from picobot.privacy.redaction import redact_json"),
        ("kernel", "from picobot.services.notes import NoteService"),
        ("tools", "import picobot.kernel.kernel"),
        ("memory", "from picobot.tasks.learning import LearningTask"),
        ("admin", "from picobot.channels.gate import Gate"),
        ("config", "from picobot import runtime"),
        ("text", "def f():\n    from picobot.kernel import kernel"),
    ],
)
def test_the_check_finds_an_upward_import(unit: str, source: str) -> None:
    assert upward_imports(unit, source)


@pytest.mark.parametrize(
    ("unit", "source"),
    [
        ("services", "from picobot.store.learned.facts import Fact"),
        ("dashboard", "from picobot.admin.api import AdminAPI"),
        ("kernel", "from picobot.kernel.commands import CommandRouter"),
        ("cli", "from picobot.channels.tui import run"),
        ("store", "from .db import Database\nimport json"),
    ],
)
def test_the_check_passes_a_downward_import(unit: str, source: str) -> None:
    assert upward_imports(unit, source) == []


@pytest.mark.parametrize("module", all_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(module: Path) -> None:
    assert upward_imports(unit_of(module), module.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "module",
    [p for p in all_modules() if floor_of(unit_of(p)) < SQL_FLOORS_FROM],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_sql_above_the_store(module: Path) -> None:
    found = violations(module.read_text(encoding="utf-8"))
    known = KNOWN_SQL.get(str(module.relative_to(PACKAGE)))
    assert len(found) <= (1 if known else 0), found

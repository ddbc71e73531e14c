"""The floors of DESIGN.md hold: channels, admin, the dashboard and MCP never touch SQL.

Every module under ``picobot/channels``, ``picobot/admin``, ``picobot/dashboard`` and
``picobot/mcp`` is parsed (never run) and refused if it imports ``sqlite3`` or
``aiosqlite``, calls a raw query method (``execute``, ``fetchall`` ...) or holds SQL in
a string literal: their data goes
through the store's repositories, where pagination and listing live.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import picobot

PACKAGE = Path(picobot.__file__).parent
TRANSPORT_FLOORS = ("channels", "admin", "dashboard", "mcp")

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
        "from picobot.store.sessions import SessionRepo",
    ],
)
def test_the_scan_passes_plain_code(source: str) -> None:
    assert violations(source) == []


@pytest.mark.parametrize("module", transport_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_channels_and_admin_hold_no_sql(module: Path) -> None:
    assert violations(module.read_text(encoding="utf-8")) == []

"""What runs in the database threads: a read in one snapshot, batches of reads and writes.

Plain functions of a ``sqlite3`` connection, handed to a connection's thread by
:class:`picobot.store.db.Database` (one trip per batch). Each returns one
``(ok, result-or-exception)`` per function, so one caller's error stays its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
WriteFn = Callable[[sqlite3.Connection], Any]
"""A function run in a database thread (a write, or a read)."""


def in_snapshot(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """In a reader thread: ``fn`` inside BEGIN ... ROLLBACK, so all of it sees one snapshot."""
    conn.execute("BEGIN")
    try:
        return fn(conn)
    finally:
        conn.execute("ROLLBACK")


def read_batch(conn: sqlite3.Connection, fns: list[WriteFn]) -> list[tuple[bool, Any]]:
    """In a reader thread: each function in its own snapshot; its result or exception."""
    outcomes: list[tuple[bool, Any]] = []
    for fn in fns:
        try:
            outcomes.append((True, in_snapshot(conn, fn)))
        except Exception as exc:
            outcomes.append((False, exc))
    return outcomes


def group_commit(conn: sqlite3.Connection, fns: list[WriteFn]) -> list[tuple[bool, Any]]:
    """In the writer thread: every function in one transaction, each in a SAVEPOINT
    (a lone function needs none: the ROLLBACK undoes it).

    Returns ``(True, result)`` or ``(False, exception)`` per function. Raises (after a
    ROLLBACK) when the transaction cannot begin or commit: then nothing was written.
    """
    conn.execute("BEGIN IMMEDIATE")
    outcomes: list[tuple[bool, Any]] = []
    try:
        if len(fns) == 1:
            # Alone in its transaction, a failing function is undone by a ROLLBACK:
            # no SAVEPOINT (two statements fewer on the write of a lone chat message).
            try:
                outcomes.append((True, fns[0](conn)))
            except Exception as exc:
                conn.execute("ROLLBACK")
                return [(False, exc)]
            conn.execute("COMMIT")
            return outcomes
        for fn in fns:
            conn.execute("SAVEPOINT w")
            try:
                result = fn(conn)
            except Exception as exc:
                conn.execute("ROLLBACK TO w")
                outcomes.append((False, exc))
            else:
                outcomes.append((True, result))
            conn.execute("RELEASE w")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcomes

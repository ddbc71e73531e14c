"""Running a multi-statement SQL script inside an open transaction."""

from __future__ import annotations

import sqlite3

from picobot.store.connection import AsyncConnection


async def run_script(conn: AsyncConnection, script: str) -> None:
    """Execute a multi-statement script inside the caller's transaction.

    ``executescript`` would COMMIT the open transaction first, so statements are split
    with ``sqlite3.complete_statement`` (which understands trigger bodies) and run
    one by one.
    """
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                await conn.execute(buffer)
            buffer = ""
    if buffer.strip().strip(";").strip() and not buffer.strip().startswith("--"):
        raise ValueError(f"incomplete SQL statement in migration: {buffer[:80]!r}")

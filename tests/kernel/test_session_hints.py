"""The kernel remembers each chat's session, and checks it in the turn's first write.

A known chat's turn skips the read that looks its session up; the write that stores
the message checks that the session is still the chat's current one. These tests
switch or delete the session behind the kernel's back (as another process, the CLI
or a purge would) and check that no message lands in the wrong session.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from picobot.kernel import kernel as kernel_module
from picobot.messages import Identity, OutboundKind
from picobot.store.connect import install_functions
from picobot.store.db import Database
from tests.kernel.conftest import ALICE, BOB, KernelFactory, run


def session_messages(db: Database) -> dict[str, list[str]]:
    """Each session's message texts, read with a separate plain sqlite3 connection."""
    with sqlite3.connect(db.path) as conn:
        install_functions(conn, db.sealer)
        rows = conn.execute(
            "SELECT session_id, picobot_open(content) FROM messages ORDER BY id"
        ).fetchall()
    found: dict[str, list[str]] = {}
    for sid, content in rows:
        found.setdefault(sid, []).append(content)
    return found


def count_reads(monkeypatch: pytest.MonkeyPatch, db: Database) -> list[int]:
    calls = [0]
    real = db.read

    async def counting(fn: Any) -> Any:
        calls[0] += 1
        return await real(fn)

    monkeypatch.setattr(db, "read", counting)
    return calls


async def test_a_known_chats_turn_does_one_read_less(
    make_kernel: KernelFactory, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = make_kernel()
    reads = count_reads(monkeypatch, db)
    first = await run(kernel, ALICE, "hello")
    first_reads, reads[0] = reads[0], 0
    second = await run(kernel, ALICE, "hello again")
    assert second[0].session_id == first[0].session_id
    assert reads[0] == first_reads - 1  # no session lookup: the write checked it
    assert session_messages(db)[first[0].session_id or ""] == [
        "hello",
        "You said: hello",
        "hello again",
        "You said: hello again",
    ]


async def test_a_session_switched_elsewhere_gets_the_message(
    make_kernel: KernelFactory, db: Database
) -> None:
    kernel = make_kernel()
    old = (await run(kernel, ALICE, "in the old one"))[0].session_id
    # Another kernel (another process, say) switches the chat to a new session.
    new = await make_kernel().sessions.create(ALICE.channel, ALICE.chat_id, ALICE.user_id)
    events = await run(kernel, ALICE, "where does this go?")
    assert events[0].session_id == new
    assert events[-1].kind == OutboundKind.DONE
    by_session = session_messages(db)
    assert by_session[new][0] == "where does this go?"
    assert "where does this go?" not in by_session[old or ""]
    # The corrected session is remembered: the next turn goes there too.
    assert (await run(kernel, ALICE, "and this"))[0].session_id == new


async def test_a_deleted_session_is_not_written_to(
    make_kernel: KernelFactory, db: Database
) -> None:
    kernel = make_kernel()
    old = (await run(kernel, ALICE, "soon gone"))[0].session_id or ""
    with sqlite3.connect(db.path) as conn:  # a purge from another process
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("DELETE FROM messages WHERE session_id = ?", (old,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (old,))
    events = await run(kernel, ALICE, "still here?")
    fresh = events[0].session_id or ""
    assert fresh and fresh != old
    assert session_messages(db) == {fresh: ["still here?", "You said: still here?"]}


async def test_the_remembered_chats_are_bounded(
    make_kernel: KernelFactory, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kernel_module, "MAX_SESSION_HINTS", 2)
    kernel = make_kernel()
    carol = Identity("tui", "tui:carol", "local")
    sessions = {who: (await run(kernel, who, "hi"))[0].session_id for who in (ALICE, BOB, carol)}
    assert len(kernel._session_hints) == 2  # the oldest chat was forgotten
    # A forgotten chat still finds its session, by the read.
    reads = count_reads(monkeypatch, db)
    assert (await run(kernel, ALICE, "back"))[0].session_id == sessions[ALICE]
    assert reads[0] == 2  # the session lookup and the window

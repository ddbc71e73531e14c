"""A session purged while a turn runs in it: the turn says so, and nothing lands in it."""

from __future__ import annotations

import asyncio

import pytest

from picobot.messages import OutboundKind
from picobot.privacy.controller import Actor, PrivacyController, SessionScope
from picobot.store.db import Database
from picobot.store.messages import SessionGone
from picobot.store.sessions import SessionRepo
from picobot.store.tool_records import ToolRecordRepo
from tests.channels.gated import GatedProvider
from tests.kernel.conftest import ALICE, KernelFactory, run

OPERATOR = Actor("operator:test", operator=True)


async def purge_session(db: Database, session_id: str) -> None:
    controller = PrivacyController(db)
    pending = await controller.request(SessionScope(session_id), OPERATOR)
    assert await controller.confirm(pending.token, OPERATOR, "y") is not None


async def count(db: Database, table: str) -> int:
    rows = await db.fetchall(f"SELECT COUNT(*) AS n FROM {table}")  # noqa: S608
    return int(rows[0]["n"])


async def test_a_session_purged_while_the_model_answers_gets_no_reply_and_says_so(
    make_kernel: KernelFactory, db: Database
) -> None:
    provider = GatedProvider()
    kernel = make_kernel(provider)
    turn = asyncio.create_task(run(kernel, ALICE, "hello"))
    await provider.entered.wait()
    session_id = await SessionRepo(db).current(ALICE.channel, ALICE.chat_id, ALICE.user_id)
    assert session_id is not None
    await purge_session(db, session_id)
    provider.gate.set()
    events = await turn
    last = events[-1]
    # Not "something went wrong; your message was saved": it was just purged.
    assert (last.kind, last.code) == (OutboundKind.ERROR, "session_deleted")
    assert "deleted" in last.text and "saved;" not in last.text
    assert await count(db, "messages") == 0 and await count(db, "sessions") == 0
    # The chat goes on in a new session.
    provider.gate.set()
    again = await run(kernel, ALICE, "still there?")
    assert again[-1].kind == OutboundKind.DONE
    assert await count(db, "messages") == 2


async def test_a_tool_record_for_a_purged_session_is_refused_plainly(db: Database) -> None:
    with pytest.raises(SessionGone):
        await ToolRecordRepo(db).add("no-such-session", "tui:alice", "t", "{}", "out", True, 0.0)
    assert await count(db, "tool_records") == 0

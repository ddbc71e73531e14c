"""A session purged while a turn runs in it: the turn says so, and nothing lands in it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from picobot.llm.base import ToolCall
from picobot.llm.scripted import ScriptedTurn
from picobot.messages import OutboundKind
from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import Actor, SessionScope, UserScope
from picobot.services.notes import NoteService
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import SessionGone
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.conversation.tool_records import ToolRecordRepo
from picobot.store.db import Database
from picobot.store.erasure.purge import PurgeCounts, PurgeStore
from picobot.tools.memory import MemoryTool
from tests.channels.gated import GatedProvider
from tests.kernel.conftest import ALICE, KernelFactory, run

OPERATOR = Actor("operator:test", operator=True)


async def purge(db: Database, scope: SessionScope | UserScope) -> None:
    controller = PrivacyController(db)
    pending = await controller.request(scope, OPERATOR)
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
    await purge(db, SessionScope(session_id))
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


async def test_a_memory_the_model_saves_after_its_user_was_purged_is_not_kept(
    make_kernel: KernelFactory, db: Database
) -> None:
    # The user purge ran (from another chat, say) while this turn's model was thinking;
    # the model then saves a memory. Nothing of the user may outlive the purge.
    save = ToolCall("c1", "memory", '{"action":"save","key":"pet","content":"a cat"}')
    provider = GatedProvider([ScriptedTurn(tool_calls=(save,)), "Saved."])
    repo = MemoryRepo(db)
    kernel = make_kernel(
        provider, tools=[MemoryTool(NoteService(repo, max_count=50, max_chars=2000))]
    )
    turn = asyncio.create_task(run(kernel, ALICE, "remember my cat"))
    await provider.entered.wait()
    await purge(db, UserScope(ALICE.user_id))
    provider.gate.set()
    events = await turn

    assert (events[-1].kind, events[-1].code) == (OutboundKind.ERROR, "session_deleted")
    assert await repo.get(ALICE.user_id, "pet") is None
    assert await count(db, "user_memories") == 0 and await count(db, "sessions") == 0


async def test_a_memory_saved_during_a_user_purge_is_swept_with_it(db: Database) -> None:
    # A save that passed its session check before the purge deleted the sessions, but
    # after it swept the memories, is taken by the purge's last sweep.
    session_id = await SessionRepo(db).create("tui", "local", ALICE.user_id)
    store = PurgeStore(db)
    real_sweep = store._sweep
    saved = False

    async def sweep_then_save(table: str, *args: Any) -> PurgeCounts:
        nonlocal saved
        done = await real_sweep(table, *args)
        if table == "user_memories" and not saved:
            saved = True
            await MemoryRepo(db).save(
                ALICE.user_id, "late", "written mid-purge", max_count=50, session_id=session_id
            )
        return done

    store._sweep = sweep_then_save  # type: ignore[method-assign]
    counts = await store.delete_user(ALICE.user_id)

    assert saved and counts.memories == 1 and counts.sessions == 1
    assert await count(db, "user_memories") == 0

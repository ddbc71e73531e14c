"""Pending purges live in the store: an instance answers what another one asked, once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from picobot.config.settings import Settings
from picobot.errors import UserError
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.privacy.controller import PrivacyController
from picobot.privacy.message_scope import undo_scope
from picobot.privacy.scopes import Actor, SessionScope, UserScope
from picobot.runtime import Runtime, open_runtime
from picobot.store.erasure.pending_purges import KEPT_AFTER_EXPIRY_SECS
from picobot.tasks.retention import RetentionTask

ALICE = Identity("telegram", "telegram:41", "41")
BOB = Identity("telegram", "telegram:42", "42")
OPERATOR = Actor("operator:cli", operator=True)


@pytest.fixture
async def two(tmp_path: Path) -> AsyncIterator[tuple[Runtime, Runtime]]:
    """Two runtimes on one data directory: two instances, each with its own connections."""
    settings = Settings(data={"dir": str(tmp_path / "data")})
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(open_runtime(settings, provider=ScriptedProvider()))
        second = await stack.enter_async_context(
            open_runtime(settings, provider=ScriptedProvider())
        )
        yield first, second


async def say(rt: Runtime, who: Identity, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(who, text))]


async def messages_of(rt: Runtime, who: Identity) -> int:
    row = await rt.db.fetchone(
        "SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session_id"
        " WHERE s.user_id = ?",
        (who.user_id,),
    )
    assert row is not None
    return int(row[0])


async def test_a_chat_purge_asked_on_one_instance_is_confirmed_on_the_other(
    two: tuple[Runtime, Runtime],
) -> None:
    a, b = two
    await say(a, ALICE, "my locker code is wombat-77")
    await say(a, BOB, "hello")
    asked = await say(a, ALICE, "/purge user")
    assert asked[-1].kind == OutboundKind.CONFIRM_REQUEST
    # Alice's "y" is taken by the other instance (its turn ran there): it is the answer.
    done = await say(b, ALICE, "y")
    assert done[-1].kind == OutboundKind.NOTICE and done[-1].text.startswith("Deleted all data")
    assert await messages_of(a, ALICE) == 0
    assert await messages_of(b, BOB) == 2
    # Taken: a second "y" on the first instance is chat, not an answer.
    assert (await say(a, ALICE, "y"))[-1].kind == OutboundKind.DONE


async def test_an_undo_asked_on_one_instance_is_cancelled_by_a_no_on_the_other(
    two: tuple[Runtime, Runtime],
) -> None:
    a, b = two
    await say(a, ALICE, "first")
    await say(a, ALICE, "second")
    assert (await say(a, ALICE, "/undo"))[-1].kind == OutboundKind.CONFIRM_REQUEST
    assert (await say(b, ALICE, "n"))[-1].text == "Purge cancelled; nothing was deleted."
    assert await messages_of(a, ALICE) == 4


async def test_a_token_is_taken_once_when_two_instances_answer_it_at_once(
    two: tuple[Runtime, Runtime],
) -> None:
    a, b = two
    await say(a, ALICE, "hello")
    pending = await a.services.purges.request(UserScope(ALICE.user_id), OPERATOR)
    outcomes = await asyncio.gather(
        a.services.purges.confirm(pending.token, OPERATOR, "y"),
        b.services.purges.confirm(pending.token, OPERATOR, "y"),
        return_exceptions=True,
    )
    done = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, UserError)]
    assert len(done) == 1 and len(refused) == 1
    assert done[0] is not None and done[0].counts.messages == 2


async def test_the_token_itself_is_not_stored(two: tuple[Runtime, Runtime]) -> None:
    a, _ = two
    await say(a, ALICE, "hello")
    pending = await a.services.purges.request(UserScope(ALICE.user_id), OPERATOR)
    await a.db.checkpoint_passive()
    files = [p for p in a.db.path.parent.iterdir() if p.name.startswith(a.db.path.name)]
    stored = b"".join(p.read_bytes() for p in files)
    assert pending.key.encode() in stored  # the row is there, keyed by the hash
    assert pending.token.encode() not in stored


async def test_only_the_actor_it_was_issued_to_can_take_it_and_it_stays_for_them(
    two: tuple[Runtime, Runtime],
) -> None:
    a, b = two
    sid = (await say(a, ALICE, "hello"))[0].session_id
    assert sid is not None
    pending = await a.services.purges.request(SessionScope(sid), Actor(ALICE.user_id))
    with pytest.raises(UserError, match="no pending purge"):
        await b.services.purges.confirm(pending.token, Actor(BOB.user_id), "y")
    with pytest.raises(UserError, match="no pending purge"):
        await b.services.purges.confirm(pending.token, OPERATOR, "y")
    result = await b.services.purges.confirm(pending.token, Actor(ALICE.user_id), "y")
    assert result is not None and result.counts.sessions == 1


async def test_a_user_purge_deletes_the_pending_purges_of_and_about_the_user(
    two: tuple[Runtime, Runtime],
) -> None:
    a, b = two
    sid = (await say(a, ALICE, "one"))[0].session_id
    await say(a, ALICE, "two")
    assert sid is not None
    # Alice's own undo, and an operator's purge of her: both name her.
    await a.services.purges.request(await undo_scope(a.db, sid), Actor(ALICE.user_id))
    other = await a.services.purges.request(UserScope(ALICE.user_id), Actor("operator:b", True))
    row = await a.db.fetchone("SELECT COUNT(*) FROM pending_purges")
    assert row is not None and row[0] == 2
    pending = await b.services.purges.request(UserScope(ALICE.user_id), OPERATOR)
    await b.services.purges.confirm(pending.token, OPERATOR, "y")
    row = await a.db.fetchone("SELECT COUNT(*) FROM pending_purges")
    assert row is not None and row[0] == 0
    with pytest.raises(UserError, match="no pending purge"):
        await a.services.purges.confirm(other.token, Actor("operator:b", True), "y")


async def test_retention_deletes_pending_purges_a_day_past_their_expiry(
    two: tuple[Runtime, Runtime],
) -> None:
    a, _ = two
    await say(a, ALICE, "hello")
    await say(a, BOB, "hello")
    now = time.time()
    await a.services.purges.request(UserScope(BOB.user_id), Actor("operator:b", True))
    # Asked long ago and never answered (a request prunes such rows too: none came since).
    old = PrivacyController(a.db, clock=lambda: now - KEPT_AFTER_EXPIRY_SECS - 120)
    stale = await old.request(UserScope(ALICE.user_id), OPERATOR)
    rows = await a.db.fetchall("SELECT user_id FROM pending_purges ORDER BY user_id")
    assert [r[0] for r in rows] == [ALICE.user_id, BOB.user_id]
    # A day past its expiry no answer finds it (not even to say it expired).
    with pytest.raises(UserError, match="no pending purge"):
        await a.services.purges.confirm(stale.token, OPERATOR, "y")
    await old.request(UserScope(ALICE.user_id), OPERATOR)
    await RetentionTask(a.db, max_age_days=90).run()
    rows = await a.db.fetchall("SELECT user_id FROM pending_purges")
    assert [r[0] for r in rows] == [BOB.user_id]

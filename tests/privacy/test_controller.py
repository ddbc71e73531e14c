"""PrivacyController and /purge: rights, confirmation binding, expiry, single use."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sized
from pathlib import Path

import pytest

from picobot.commands.purge import PurgeCommands
from picobot.config.settings import Settings
from picobot.errors import AccessDenied, UserError
from picobot.kernel.kernel import Interceptor
from picobot.kernel.prompt.retriever import MemoryRetriever
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.privacy.controller import PrivacyController
from picobot.privacy.fact_scope import FactsScope
from picobot.privacy.scopes import (
    DAY,
    MAX_PURGE_DAYS,
    Actor,
    OlderThanScope,
    SessionScope,
    UserScope,
)
from picobot.runtime import Runtime, open_runtime
from picobot.services.purges import PurgeService
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.learned.fact_rules import lifecycle_rules, observation
from picobot.store.learned.fact_writes import FactStore

ALICE = Identity("whatsapp", "whatsapp:111@s.whatsapp.net", "111")
BOB = Identity("whatsapp", "whatsapp:222@s.whatsapp.net", "222")
OPERATOR = Actor("operator:cli", operator=True)


class Clock:
    """A controllable clock."""

    def __init__(self) -> None:
        # Messages are stamped with the real time; start from it.
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings(data={"dir": str(tmp_path / "data")})
    async with open_runtime(settings, provider=ScriptedProvider()) as runtime:
        yield runtime


async def say(rt: Runtime, who: Identity, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(who, text))]


async def count(rt: Runtime, table: str) -> int:
    row = await rt.db.fetchone(f"SELECT COUNT(*) FROM {table}")  # noqa: S608
    assert row is not None
    return int(row[0])


async def test_chat_purge_of_own_session_asks_then_deletes(rt: Runtime) -> None:
    sid = (await say(rt, ALICE, "hello"))[0].session_id
    await say(rt, BOB, "bob stays")
    ask = await say(rt, ALICE, "/purge session")
    assert ask[-1].kind == OutboundKind.CONFIRM_REQUEST
    assert "1 session" in ask[-1].text and "2 messages" in ask[-1].text
    assert ask[-1].token
    done = await say(rt, ALICE, "yes")
    assert "Deleted session" in done[-1].text
    assert await rt.kernel.sessions.get(sid or "") is None
    assert await count(rt, "messages") == 2  # Bob's


async def test_anything_but_yes_cancels(rt: Runtime) -> None:
    await say(rt, ALICE, "hello")
    await say(rt, ALICE, "/purge user")
    cancelled = await say(rt, ALICE, "s")
    assert cancelled[-1].text.startswith("Purge cancelled")
    assert await count(rt, "messages") == 2
    # The answer was consumed: a later "y" is just chat, not a confirmation.
    later = await say(rt, ALICE, "y")
    assert later[-1].kind == OutboundKind.DONE
    assert await count(rt, "messages") == 4


async def test_another_users_y_does_not_confirm(rt: Runtime) -> None:
    await say(rt, ALICE, "hello")
    ask = await say(rt, ALICE, "/purge user")
    token = ask[-1].token
    assert token is not None
    stolen = [e async for e in rt.kernel.confirm(BOB, token, "y")]
    assert stolen[-1].kind == OutboundKind.ERROR
    assert await count(rt, "messages") == 2
    ok = [e async for e in rt.kernel.confirm(ALICE, token, "y")]
    assert "Deleted all data of user" in ok[-1].text
    assert await count(rt, "messages") == 0


async def test_a_yes_in_another_chat_is_chat_not_the_answer(rt: Runtime) -> None:
    dm = Identity("telegram", "telegram:42", "42")
    group = Identity("telegram", "telegram:42", "-100123")
    await say(rt, dm, "hello")
    assert (await say(rt, dm, "/purge user"))[-1].kind == OutboundKind.CONFIRM_REQUEST
    in_group = await say(rt, group, "yes")
    assert in_group[-1].kind == OutboundKind.DONE  # answered as chat, stored
    assert await count(rt, "messages") == 4
    done = await say(rt, dm, "yes")
    assert "Deleted all data of user telegram:42" in done[-1].text
    assert await count(rt, "messages") == 0


async def test_a_token_channels_chat_message_is_never_the_answer(rt: Runtime) -> None:
    phone = Identity("ws", "ws:alice", "ws:alice")
    await say(rt, phone, "hello")
    token = (await say(rt, phone, "/purge user"))[-1].token
    assert token is not None
    # Another connection of the same key chats meanwhile: a normal turn.
    chat = await say(rt, phone, "unrelated question from my phone")
    assert chat[-1].kind == OutboundKind.DONE
    assert await count(rt, "messages") == 4
    ok = [e async for e in rt.kernel.confirm(phone, token, "y")]
    assert "Deleted all data of user ws:alice" in ok[-1].text
    assert await count(rt, "messages") == 0


async def test_a_remembered_chat_asks_the_purge_hook_only_when_a_purge_waits(
    rt: Runtime,
) -> None:
    (hook,) = rt.kernel.interceptors
    asked: list[str] = []

    async def answer(identity: Identity, text: str) -> list[Outbound] | None:
        asked.append(text)
        return await hook.answer(identity, text)

    rt.kernel.interceptors[:] = [Interceptor(hook.awaits, answer)]
    await say(rt, ALICE, "hello")  # a new chat: its session is looked up, the hook asked
    await say(rt, ALICE, "and again")  # remembered: the write's check found nothing
    assert asked == ["hello"]
    assert await count(rt, "messages") == 4
    await say(rt, ALICE, "/purge user")
    done = await say(rt, ALICE, "yes")
    assert "Deleted all data of user" in done[-1].text
    assert asked == ["hello", "/purge user", "yes"]
    assert await count(rt, "messages") == 0


async def test_a_purge_asked_on_another_instance_takes_the_chats_next_message(
    tmp_path: Path, rt: Runtime
) -> None:
    await say(rt, ALICE, "hello")  # this instance now remembers Alice's session
    settings = Settings(data={"dir": str(tmp_path / "data")})
    async with open_runtime(settings, provider=ScriptedProvider()) as other:
        ask = await say(other, ALICE, "/purge user")
        assert ask[-1].kind == OutboundKind.CONFIRM_REQUEST
    # Her "yes" reaches the first instance: the answer, not a chat message.
    done = await say(rt, ALICE, "yes")
    assert "Deleted all data of user" in done[-1].text
    assert await count(rt, "messages") == 0


async def test_token_is_single_use(rt: Runtime) -> None:
    await say(rt, ALICE, "hello")
    token = (await say(rt, ALICE, "/purge session"))[-1].token
    assert token is not None
    first = [e async for e in rt.kernel.confirm(ALICE, token, "n")]
    assert "cancelled" in first[-1].text
    again = [e async for e in rt.kernel.confirm(ALICE, token, "y")]
    assert again[-1].kind == OutboundKind.ERROR
    assert await count(rt, "messages") == 2


async def test_chat_user_cannot_purge_older_or_someone_else(rt: Runtime) -> None:
    bob_sid = (await say(rt, BOB, "bob's"))[0].session_id
    older = await say(rt, ALICE, "/purge older 1")
    assert older[-1].kind == OutboundKind.ERROR and "operator" in older[-1].text
    other = await say(rt, ALICE, f"/purge session {bob_sid}")
    assert other[-1].kind == OutboundKind.ERROR
    user = await say(rt, ALICE, f"/purge user {BOB.user_id}")
    assert user[-1].kind == OutboundKind.ERROR
    assert await count(rt, "messages") == 2


@pytest.mark.parametrize("gap", [" ", "\t", "\n", "  "])
async def test_purge_scope_and_its_argument_may_be_apart_by_any_whitespace(
    rt: Runtime, gap: str
) -> None:
    sid = (await say(rt, ALICE, "hello"))[0].session_id
    # A tab or line break (a pasted command, a phone keyboard) is not a usage error.
    asked = await say(rt, ALICE, f"/purge session{gap}{sid}")
    assert asked[-1].kind == OutboundKind.CONFIRM_REQUEST and asked[-1].token is not None
    assert sid is not None and sid in asked[-1].text


async def test_confirmation_expires(tmp_path: Path, rt: Runtime) -> None:
    clock = Clock()
    controller = PrivacyController(rt.db, confirmation_timeout_secs=60, clock=clock)
    await say(rt, ALICE, "hello")
    actor = Actor(ALICE.user_id)
    origin = (ALICE.channel, ALICE.chat_id)
    pending = await controller.request(UserScope(ALICE.user_id), actor, origin)
    clock.now += 61
    with pytest.raises(UserError, match="confirmation expired"):
        await controller.confirm(pending.token, actor, "y")
    assert await count(rt, "messages") == 2
    assert await controller.pending_for(actor, origin, "y") is None


async def test_a_late_yes_in_chat_is_told_the_purge_expired(rt: Runtime) -> None:
    clock = Clock()
    # In place of the runtime's own answer, which would take the stored purge on the
    # real clock.
    rt.kernel.interceptors.clear()
    PurgeCommands(PurgeService(PrivacyController(rt.db, clock=clock))).register(rt.kernel)
    await say(rt, ALICE, "hello")
    assert (await say(rt, ALICE, "/purge user"))[-1].kind == OutboundKind.CONFIRM_REQUEST
    clock.now += 61
    late = await say(rt, ALICE, "yes")
    # Not a chat turn (a model answering "yes" could claim the data was deleted).
    assert late[-1].kind == OutboundKind.ERROR
    assert "expired; nothing was deleted" in late[-1].text
    assert await count(rt, "messages") == 2
    # After an expiry, any other message is ordinary chat; so is a later "yes".
    await say(rt, ALICE, "/purge user")
    clock.now += 61
    assert (await say(rt, ALICE, "something else"))[-1].kind == OutboundKind.DONE
    assert (await say(rt, ALICE, "yes"))[-1].kind == OutboundKind.DONE
    assert await count(rt, "messages") == 6


async def test_operator_rights(rt: Runtime) -> None:
    controller = PrivacyController(rt.db)
    sid = (await say(rt, ALICE, "hello"))[0].session_id
    assert sid is not None
    with pytest.raises(AccessDenied):
        await controller.plan(SessionScope(sid), Actor(BOB.user_id))
    with pytest.raises(AccessDenied):
        await controller.plan(OlderThanScope(30), Actor(ALICE.user_id))
    # Chosen facts are an operator's purge, even when they are all the caller's own.
    with pytest.raises(AccessDenied):
        await controller.plan(FactsScope((1,), 1), Actor(ALICE.user_id))
    plan = await controller.plan(SessionScope(sid), OPERATOR)
    assert plan.counts.messages == 2 and plan.counts.sessions == 1
    result = await controller.execute(plan)
    assert result.counts == plan.counts


async def test_older_than_plan_matches_result(rt: Runtime) -> None:
    clock = Clock()
    controller = PrivacyController(rt.db, clock=clock)
    await say(rt, ALICE, "recent")
    clock.now += 10 * DAY
    pending = await controller.request(OlderThanScope(5), OPERATOR)
    assert pending.plan.counts.messages == 2
    result = await controller.confirm(pending.token, OPERATOR, "yes")
    assert result is not None and result.counts == pending.plan.counts
    assert await count(rt, "messages") == 0


@pytest.mark.parametrize("days", [0, MAX_PURGE_DAYS + 1, 10**400])
async def test_older_than_days_out_of_range_are_refused(rt: Runtime, days: int) -> None:
    # 10**400 days cannot even become a float cutoff: refused before any arithmetic.
    with pytest.raises(UserError, match=f"between 1 and {MAX_PURGE_DAYS}"):
        await PrivacyController(rt.db).plan(OlderThanScope(days), OPERATOR)


async def test_purge_is_logged_without_content(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    await say(rt, ALICE, "my very private words")
    with caplog.at_level("INFO", logger="picobot.privacy.controller"):
        await say(rt, ALICE, "/purge user")
        await say(rt, ALICE, "y")
    lines = [r.getMessage() for r in caplog.records if "purge executed" in r.getMessage()]
    assert len(lines) == 1 and ALICE.user_id in lines[0] and "2 messages" in lines[0]
    assert "private words" not in caplog.text


async def test_a_purge_that_fails_midway_tells_the_user_what_happened(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    import picobot.privacy.controller as controller_module
    from picobot.commands.purge import PURGE_FAILED
    from picobot.errors import StoreUnavailable
    from picobot.store.task_runs import erasure_state

    async def disk_full(*_args: object, **_kw: object) -> None:
        raise StoreUnavailable("database /srv/data/conversations.db: disk is full")

    await say(rt, ALICE, "hello")
    await say(rt, BOB, "bob stays")
    await say(rt, ALICE, "/purge user")
    # The erasure after the deletion fails: the full one, or a key deletion's checkpoint.
    monkeypatch.setattr(controller_module, "erase_residue", disk_full)
    monkeypatch.setattr(rt.db, "checkpoint_passive", disk_full)
    failed = await say(rt, ALICE, "y")
    assert failed[-1].kind == OutboundKind.ERROR and failed[-1].text == PURGE_FAILED
    assert "/srv" not in failed[-1].text  # the operator's paths stay in the log
    assert await count(rt, "messages") == 2  # Bob's: Alice's rows are gone
    assert (await erasure_state(rt.db, 86_400)).purge_residue_since is not None


async def note(rt: Runtime, who: Identity, text: str) -> None:
    await MemoryRepo(rt.db).save(who.user_id, "note", text, max_count=10)


async def fact(rt: Runtime, who: Identity, text: str) -> None:
    facts = FactStore(rt.db, rules=lifecycle_rules(rt.settings.memory.learning))
    found = observation(None, "preference", text)
    await facts.create(who.user_id, found, confidence=None, actor="test", now=time.time())


@pytest.mark.parametrize(
    ("keep", "cache_of", "job_name"),
    [
        (note, lambda r: r.memory_cache, "memory-cache"),
        (fact, lambda r: r.fact_cache, "fact-cache"),
    ],
    ids=["memories", "facts"],
)
async def test_a_purged_users_rows_leave_the_servers_cache(
    rt: Runtime,
    keep: Callable[[Runtime, Identity, str], Awaitable[None]],
    cache_of: Callable[[MemoryRetriever], Sized],
    job_name: str,
) -> None:
    await keep(rt, ALICE, "my PIN is 4321")
    await keep(rt, BOB, "a fish")
    await say(rt, ALICE, "hello")
    await say(rt, BOB, "hello")
    assert isinstance(rt.kernel.retriever, MemoryRetriever)
    cache = cache_of(rt.kernel.retriever)
    assert len(cache) == 2  # both turns' prompts read their user's rows

    plan = await PrivacyController(rt.db).plan(UserScope(ALICE.user_id), OPERATOR)
    await PrivacyController(rt.db).execute(plan)
    # The runtime's job drops it within seconds, whoever purged (here: run it now).
    job = rt.tasks.job(job_name)
    runs = job.status.runs
    job.wake()
    status = await job.wait_runs(runs + 1)
    assert status.last_result == "1"
    assert len(cache) == 1

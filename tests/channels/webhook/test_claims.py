"""Claims: instances sharing one store never take the same inbox message or reply, a
chat's messages and replies stay in order across instances, and a dead instance's rows
are taken over once its claims expire."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path

from picobot.channels.webhook.base import PlatformMessage
from picobot.config.settings import DataSettings, Settings
from picobot.runtime import Runtime, open_database
from picobot.store.channels.webhooks import CLAIM_SECS, OutboundItem, WebhookStore
from tests.channels.webhook.conftest import FakeClock, answer
from tests.killed import kill_when_ready


def _msg(message_id: str, chat: str = "c1") -> PlatformMessage:
    return PlatformMessage(message_id, "generic:alice", chat, "alice", "hi", {"chat": chat})


def _two(runtime: Runtime, clock: FakeClock) -> tuple[WebhookStore, WebhookStore]:
    """Two instances' stores on one database: only their ids differ."""
    return (
        WebhookStore(runtime.db, clock=clock, holder="instance-a"),
        WebhookStore(runtime.db, clock=clock, holder="instance-b"),
    )


async def _queued(store: WebhookStore, replies: list[str]) -> OutboundItem:
    """A message of alice's answered with ``replies``: the head of their queue."""
    inbox_id = await store.accept("generic", _msg("m1"))
    assert inbox_id and await store.start_processing(inbox_id) == 1
    assert await answer(store, inbox_id, replies) == len(replies)
    return (await store.outbound_heads(10, ["generic"]))[0]


async def test_a_message_is_run_by_one_instance_and_a_chat_in_order(runtime: Runtime) -> None:
    clock = FakeClock()
    a, b = _two(runtime, clock)
    first = await a.accept("generic", _msg("m1"))
    second = await b.accept("generic", _msg("m2"))
    other_chat = await b.accept("generic", _msg("m3", chat="c2"))
    assert first and second and other_chat
    assert await a.start_processing(first) == 1
    assert await b.start_processing(first) is None  # a's turn
    assert [i.id for i in await b.pending_inbox(10, ["generic"])] == [second, other_chat]
    # The chat's next message waits for the first, whichever instance runs it...
    assert await b.start_processing(second) is None
    assert await b.start_processing(other_chat) == 1  # ...other chats do not
    assert await answer(a, first, ["one"]) == 1
    assert await b.start_processing(second) == 1
    # b stalls (or dies) mid-turn: a takes it over once the claim expired, as a
    # further attempt, and only one answer is ever queued.
    assert await a.start_processing(second) is None
    clock.now += CLAIM_SECS + 1
    assert await a.start_processing(second) == 2
    assert await answer(a, second, ["two"]) == 1
    assert await answer(b, second, ["late"]) == 0


async def test_a_reply_is_sent_by_one_instance_and_the_next_waits_for_it(
    runtime: Runtime,
) -> None:
    clock = FakeClock()
    a, b = _two(runtime, clock)
    head = await _queued(a, ["one", "two"])
    now = clock()
    claimed = await a.claim_due(head.id, now)
    assert claimed is not None and claimed.text == "one"
    assert await b.claim_due(head.id, now) is None  # a is sending it
    assert await b.outbound_heads(10, ["generic"]) == []  # and "two" waits behind it
    # a's attempt failed: the retry is anyone's once due.
    await a.mark_retry(head.id, "HTTP 502", now + 5)
    assert await b.claim_due(head.id, now) is None  # not due yet
    clock.now += 6
    again = await b.claim_due(head.id, clock())
    assert again is not None and again.attempts == 1
    await b.mark_sent(head.id, clock())
    [nxt] = await a.outbound_heads(10, ["generic"])
    assert nxt.text == "two"
    assert await a.renew_claim("outbound_queue", head.id) is False  # sent: nothing to keep


async def test_a_purge_takes_a_claimed_reply_and_the_sender_cannot_bring_it_back(
    runtime: Runtime,
) -> None:
    clock = FakeClock()
    a, b = _two(runtime, clock)
    head = await _queued(a, ["secret answer"])
    assert await a.claim_due(head.id, clock()) is not None
    assert await b.delete_user("generic:alice") > 0  # a purge on the other instance
    await a.mark_sent(head.id, clock())  # a's send finished meanwhile: a no-op
    assert await a.renew_claim("outbound_queue", head.id) is False
    rows = await runtime.db.fetchall("SELECT id FROM outbound_queue WHERE id = ?", (head.id,))
    assert rows == []


KILLED_SENDER = textwrap.dedent(
    """
    import asyncio, sys, time
    from picobot.config.settings import Settings
    from picobot.runtime import open_database
    from picobot.store.channels.webhooks import WebhookStore

    async def main() -> None:
        async with open_database(Settings(data={"dir": sys.argv[1]})) as db:
            store = WebhookStore(db, holder="doomed")
            item = await store.claim_due(int(sys.argv[2]), time.time())
            assert item is not None
            print("sending", flush=True)
            await asyncio.sleep(3600)  # killed here, mid-delivery

    asyncio.run(main())
    """
)


async def test_a_reply_claimed_by_a_killed_instance_is_sent_once_its_claim_expires(
    runtime: Runtime, tmp_path: Path
) -> None:
    store = WebhookStore(runtime.db, holder="survivor")
    head = await _queued(store, ["hello"])
    await kill_when_ready(
        KILLED_SENDER, str(runtime.settings.data_dir), str(head.id), ready=b"sending"
    )
    assert await store.outbound_heads(10, ["generic"]) == []  # the dead one's claim
    later = WebhookStore(runtime.db, holder="survivor", clock=lambda: 4e9)  # past it
    [head_again] = await later.outbound_heads(10, ["generic"])
    taken = await later.claim_due(head_again.id, 4e9)
    assert taken is not None and taken.text == "hello"


CHATS, PER_CHAT = 6, 25


async def _run_turns(store: WebhookStore, answered: list[tuple[str, str]]) -> None:
    """One instance's turn worker: take what it can claim, answer it, until none is left."""
    while True:
        pending = await store.pending_inbox(50, ["generic"])
        if not pending:
            return
        for item in pending:
            if await store.start_processing(item.id) is None:
                continue  # the other instance's, or its chat's earlier message is pending
            await asyncio.sleep(0)  # the turn: let the other instance run meanwhile
            answered.append((item.chat_id, item.message_id))
            await store.mark_processed(
                item.id,
                [f"re {item.message_id}"],
                platform="generic",
                reply_to={"chat": item.chat_id},
                user_id=item.user_id,
                chat_id=item.chat_id,
            )


async def _send_replies(store: WebhookStore, sent: list[tuple[str, str]]) -> None:
    """One instance's delivery worker: claim each chat's due head, send it, mark it sent."""
    while True:
        heads = await store.outbound_heads(50, ["generic"])
        if not heads:
            return
        for head in heads:
            claimed = await store.claim_due(head.id, time.time())
            if claimed is None:
                continue
            await asyncio.sleep(0)  # the platform's answer
            sent.append((claimed.chat_id, claimed.text))
            await store.mark_sent(claimed.id, time.time())


async def test_two_connections_on_one_file_answer_and_send_each_message_once_in_order(
    tmp_path: Path,
) -> None:
    # Two instances: each its own Database (connections, writer thread, group commit)
    # on one file, racing for the same rows.
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    async with open_database(settings) as one, open_database(settings) as two:
        a = WebhookStore(one, holder="instance-a")
        b = WebhookStore(two, holder="instance-b")
        expected: dict[str, list[str]] = {}
        for n in range(PER_CHAT):
            for c in range(CHATS):
                chat, message_id = f"c{c}", f"m{c}-{n:03}"
                store = a if (n + c) % 2 else b  # accepted by either instance
                assert await store.accept("generic", _msg(message_id, chat))
                expected.setdefault(chat, []).append(message_id)

        answered: list[tuple[str, str]] = []
        await asyncio.gather(_run_turns(a, answered), _run_turns(b, answered))
        sent: list[tuple[str, str]] = []
        await asyncio.gather(_send_replies(a, sent), _send_replies(b, sent))

    total = CHATS * PER_CHAT
    assert len(answered) == total and len(set(answered)) == total  # each once
    assert len(sent) == total and len(set(sent)) == total
    for chat, ids in expected.items():
        assert [m for c, m in answered if c == chat] == ids  # in the order accepted
        assert [t for c, t in sent if c == chat] == [f"re {m}" for m in ids]

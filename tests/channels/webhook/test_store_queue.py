"""The webhook store: the durable inbox and reply queue, and what its failures do.

Split from ``test_core.py``; the generic platform and the stand-in ``platform_api``
are the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from picobot.backoff import Backoff
from picobot.channels.webhook.base import PlatformMessage
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.errors import StoreUnavailable
from picobot.runtime import Runtime
from picobot.store.channels.webhooks import InboundMessage, WebhookStore
from picobot.store.db import Database
from picobot.store.erasure.purge import PurgeStore
from picobot.store.migrations import MIGRATIONS, apply_migrations
from picobot.store.migrations.webhooks import m013_webhook_replay_guard
from tests.channels.webhook.conftest import (
    FakeClock,
    PlatformAPI,
    Webhooks,
    answer,
    message,
    post_generic,
    rows,
    texts,
)
from tests.store.search.test_search import old_session


def test_backoff_doubles_up_to_the_cap_and_honours_retry_after() -> None:
    backoff = Backoff(base_secs=1.0, cap_secs=300.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 9, 10)] == [1.0, 2.0, 4.0, 256.0, 300.0]
    assert backoff.delay(1, retry_after=30.0) == 30.0
    assert backoff.delay(5, retry_after=2.0) == 16.0
    assert backoff.delay(1, retry_after=10**9) == 3600.0


def _msg(message_id: str, user: str = "alice", chat: str = "c1") -> PlatformMessage:
    return PlatformMessage(message_id, f"generic:{user}", chat, user, "hi", {"chat": chat})


async def test_store_enqueues_the_replies_of_a_message_once_and_in_seq_order(
    runtime: Runtime,
) -> None:
    store = WebhookStore(runtime.db)
    inbox_id = await store.accept("generic", _msg("m1"))
    assert inbox_id is not None
    assert await store.accept("generic", _msg("m1")) is None
    assert await store.accept("other", _msg("m1")) is not None  # ids are per platform
    assert await store.start_processing(inbox_id) == 1
    assert await answer(store, inbox_id, ["a", "b", "c"]) == 3
    # A second run (a stale read, a restart mid-commit) neither runs nor answers again.
    assert await store.start_processing(inbox_id) is None
    assert await answer(store, inbox_id, ["a", "b", "c"]) == 0
    assert await store.queue_depth() == 3
    sent = []
    while due := await store.due_outbound(1e12, 10):
        assert len(due) == 1  # one head per chat
        sent.append((due[0].seq, due[0].text))
        await store.mark_sent(due[0].id, 1.0)
    assert sent == [(0, "a"), (1, "b"), (2, "c")]


async def test_store_answers_a_message_purged_while_its_turn_ran(runtime: Runtime) -> None:
    store = WebhookStore(runtime.db)
    inbox_id = await store.accept("generic", _msg("m1"))
    assert inbox_id is not None and await store.count_user("generic:alice") == 1
    assert await store.delete_user("generic:alice") == 1
    assert await answer(store, inbox_id, ["Deleted ..."]) == 1
    (item,) = await store.due_outbound(1e12, 10)
    assert (item.inbox_id, item.text) == (None, "Deleted ...")


async def test_store_cleanup_deletes_everything_older_than_the_cutoff(runtime: Runtime) -> None:
    clock = FakeClock()
    store = WebhookStore(runtime.db, clock=clock)
    done = await store.accept("generic", _msg("m1"))
    pending = await store.accept("generic", _msg("m2", user="bob", chat="c2"))
    assert done is not None and pending is not None
    await answer(store, done, ["r1"])
    (reply,) = await store.due_outbound(clock.now, 10)
    await store.mark_failed(reply.id, "HTTP 400")
    unsent = await store.accept("generic", _msg("m3", user="carol", chat="c3"))
    assert unsent is not None
    await answer(store, unsent, ["r3"])  # a reply still pending (platform off, say)
    clock.advance(100)
    newer = await store.accept("generic", _msg("m4", user="dave", chat="c4"))
    assert newer is not None
    # Pending work older than the cutoff goes too: it holds text retention deleted
    # everywhere else, and waits for a platform that is no longer there.
    assert await store.count_before(clock.now) == 5
    assert await store.delete_before(clock.now) == 5
    remaining = await rows(runtime, "SELECT message_id, status FROM webhook_inbox")
    assert remaining == [("m4", "pending")]
    assert await store.queue_depth() == 0 and await store.count_user("generic:bob") == 0


class FlakyStore(WebhookStore):
    """A store whose named write fails the first ``times`` calls, like a locked disk."""

    def __init__(self, runtime: Runtime, method: str, times: int = 1) -> None:
        super().__init__(runtime.db)
        self.method = method
        self.failures_left = times

    def _maybe_fail(self, method: str) -> None:
        if method == self.method and self.failures_left > 0:
            self.failures_left -= 1
            raise StoreUnavailable("database is locked")

    async def accept(self, platform: str, msg: InboundMessage, **kw: Any) -> int | None:
        self._maybe_fail("accept")
        return await super().accept(platform, msg, **kw)

    async def mark_processed(self, inbox_id: int, replies: Sequence[str], **kw: Any) -> int:
        self._maybe_fail("mark_processed")
        return await super().mark_processed(inbox_id, replies, **kw)

    async def mark_sent(self, outbound_id: int, now: float) -> None:
        self._maybe_fail("mark_sent")
        await super().mark_sent(outbound_id, now)


async def test_message_that_could_not_be_stored_is_not_acknowledged(
    runtime: Runtime, webhooks: Webhooks, generic: GenericPlatform, client: aiohttp.ClientSession
) -> None:
    bot = await webhooks.start(generic, store=FlakyStore(runtime, "accept"))
    status, _ = await post_generic(client, bot.url("generic"), message("hello", "m1"))
    assert status == 503  # the platform delivers it again later
    status, _ = await post_generic(client, bot.url("generic"), message("hello", "m1"))
    assert status == 200
    await bot.server.wait_for(lambda s: s.delivered == 1)


async def test_store_failures_after_the_turn_or_the_send_are_retried(
    runtime: Runtime,
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    store = FlakyStore(runtime, "mark_processed")
    bot = await webhooks.start(generic, store=store, store_retry_secs=0.01)
    await post_generic(client, bot.url("generic"), message("hello", "m1"))
    await bot.server.wait_for(lambda s: s.delivered == 1)
    # The turn ran twice (its result could not be recorded the first time), the
    # reply was enqueued and sent once.
    assert texts(platform_api) == ["You said: hello"]
    assert await rows(runtime, "SELECT attempts, status FROM webhook_inbox") == [(2, "done")]
    store.method, store.failures_left = "mark_sent", 1
    await post_generic(client, bot.url("generic"), message("again", "m2"))
    await bot.server.wait_for(lambda s: s.delivered == 2)
    # Sent, but not recorded: sent again after a pause (at least once), then recorded.
    assert texts(platform_api)[1:] == ["You said: again", "You said: again"]
    assert await bot.server.queue_depth() == 0


async def test_a_session_purge_takes_its_webhook_rows_and_no_others(
    webhooks: Webhooks,
    generic: GenericPlatform,
    client: aiohttp.ClientSession,
    platform_api: PlatformAPI,
) -> None:
    platform_api.fail(1, status=403)  # the first reply fails for good: its text stays queued
    bot = await webhooks.start(generic)
    url = bot.url("generic")
    await post_generic(client, url, message("first TOPSECRET", "m1"))
    await bot.server.wait_for(lambda s: s.delivery_failures == 1)
    await post_generic(client, url, message("/new", "m2"))
    await post_generic(client, url, message("second", "m3"))
    await bot.server.wait_for(lambda s: s.delivered == 2)
    ((first,), _) = await rows(bot.runtime, "SELECT id FROM sessions ORDER BY created_at, rowid")
    store = PurgeStore(bot.runtime.db)

    assert (await store.count_session(str(first))).webhook_rows == 2  # m1 and its reply
    assert (await store.delete_session(str(first))).webhook_rows == 2

    inbox = await rows(bot.runtime, "SELECT message_id FROM webhook_inbox ORDER BY id")
    assert [json.loads(str(m))[-1] for (m,) in inbox] == ["m2", "m3"]
    queue = await rows(
        bot.runtime, "SELECT status, picobot_open(text) FROM outbound_queue ORDER BY id"
    )
    assert len(queue) == 2 and ("failed", "You said: first TOPSECRET") not in queue
    assert all(status == "sent" for status, _ in queue)


async def test_the_migration_links_existing_rows_to_their_session(tmp_path: Path) -> None:
    # Rows queued by an older version: linked through the message their inbox row became.
    db = await Database.open(tmp_path / "old.db", migrate=False)
    try:
        guard = MIGRATIONS.index(m013_webhook_replay_guard)
        await apply_migrations(db, MIGRATIONS[:guard])
        # As an older version stored them (without events, which came later).
        sid = await old_session(db, "generic:alice")
        await db.execute_write(
            "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
            " created_at, source_id) VALUES (?, 1, 'user', 'hi', 1, 0, 'generic:m1')",
            (sid,),
        )
        inbox = (
            "INSERT INTO webhook_inbox (platform, message_id, user_id, chat_id, text,"
            " reply_to_json, received_at) VALUES ('generic', ?, 'generic:alice', 'c1', '', '{}', 0)"
            " RETURNING id"
        )
        linked = await db.write(lambda conn: conn.execute(inbox, ("m1",)).fetchone()[0])
        # No message of it was stored.
        command = await db.write(lambda conn: conn.execute(inbox, ("m2",)).fetchone()[0])
        await db.execute_write(
            "INSERT INTO outbound_queue (platform, user_id, chat_id, reply_to_json, text,"
            " next_attempt_at, created_at, inbox_id) VALUES"
            " ('generic', 'generic:alice', 'c1', '{}', 'a', 0, 0, ?),"
            " ('generic', 'generic:alice', 'c1', '{}', 'b', 0, 0, ?)",
            (linked, command),
        )
        assert (await apply_migrations(db))[0] == "m013_webhook_replay_guard"
        found = await db.fetchall("SELECT id, session_id FROM webhook_inbox ORDER BY id")
        assert [tuple(r) for r in found] == [(linked, sid), (command, None)]
        queue = await db.fetchall("SELECT text, session_id FROM outbound_queue ORDER BY id")
        assert [tuple(r) for r in queue] == [("a", sid), ("b", None)]
    finally:
        await db.close()

"""A stopped delivery worker ends even when its cancellation is lost to a wake-up.

On Python 3.11, ``asyncio.wait_for`` with a timeout returns the inner result instead of
raising when the task is cancelled in the same loop pass in which the awaited event
fired (a send released as the server closes): a worker waiting for a retry that comes
due later, woken so as it was cancelled, made the server's close wait for ever.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from picobot.backoff import Backoff
from picobot.channels.webhook.base import PlatformMessage
from picobot.channels.webhook.delivery import DeliveryWorker
from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.channels.webhook.workers import WebhookStats, WorkerContext
from picobot.config.channels import GenericWebhookSettings
from picobot.store.channels.webhooks import WebhookStore
from picobot.store.db import Database
from tests.channels.webhook.generic_client import SECRET


async def test_a_stopped_worker_ends_when_a_wake_up_swallows_its_cancellation(
    tmp_path: Path,
) -> None:
    db = await Database.open(tmp_path / "conversations.db")
    try:
        # One reply queued at t=1000; the worker's clock says 0: it waits for it.
        store = WebhookStore(db, clock=lambda: 1000.0)
        msg = PlatformMessage("m1", "generic:alice", "c1", "alice", "hi", {"chat": "c1"})
        inbox_id = await store.accept("generic", msg)
        assert inbox_id is not None
        await store.mark_processed(
            inbox_id,
            ["hello"],
            platform="generic",
            reply_to={"chat": "c1"},
            user_id="generic:alice",
            chat_id="c1",
        )
        platform = GenericPlatform(
            GenericWebhookSettings(enabled=True, callback_url="http://127.0.0.1:9/cb"), SECRET
        )
        ctx = WorkerContext(
            platforms={"generic": platform},
            store=store,
            stats=WebhookStats(),
            changed=lambda: None,
            spawn=lambda _name, coro: asyncio.ensure_future(coro),
        )
        worker = DeliveryWorker(ctx, max_attempts=3, backoff=Backoff(1.0, 1.0), clock=lambda: 0.0)
        run = asyncio.create_task(worker.run())
        await asyncio.wait_for(worker.idle.wait(), 5)  # waiting, with a timeout, for t=1000
        worker.stop()
        worker.wake()
        await asyncio.sleep(0)  # the wake-up's wait finishes; wait_for is not resumed yet
        run.cancel()
        await asyncio.wait({run}, timeout=5)
        assert run.done()
    finally:
        await db.close()

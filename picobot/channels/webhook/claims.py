"""Claims kept while their work goes on, and how often workers look for rows that
other instances left.

Several instances may share one store (docs/deploy.md). The store claims an inbox
message or a reply for one instance in the statement that finds it
(:meth:`~picobot.store.channels.webhooks.WebhookStore.start_processing`,
:meth:`~picobot.store.channels.webhooks.WebhookStore.claim_due`); a claim lasts
:data:`~picobot.store.channels.webhooks.CLAIM_SECS`, so a turn or an upload that takes
longer renews it here, every third of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from picobot.errors import StoreUnavailable
from picobot.store.channels.webhooks import CLAIM_SECS, ClaimedTable, WebhookStore

log = logging.getLogger(__name__)

POLL_SECS = 2.0
"""How often an idle worker looks again for work another instance left: a chat's next
message once its turn there is done, a dead instance's rows once their claims expire."""


@contextlib.asynccontextmanager
async def kept(store: WebhookStore, table: ClaimedTable, row_id: int) -> AsyncIterator[None]:
    """Renew this instance's claim on the row while the body runs."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(CLAIM_SECS / 3)
            try:
                if not await store.renew_claim(table, row_id):
                    return  # done meanwhile (a purge), or taken over after a stall
            except StoreUnavailable:
                log.warning("claim on %s row %d not renewed: store unavailable", table, row_id)

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

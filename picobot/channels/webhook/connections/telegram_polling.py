"""Telegram long polling (``[channels.webhook.telegram] mode = "polling"``).

PicoBot asks the Bot API for updates (``getUpdates`` with a long-poll ``timeout``)
instead of waiting for webhooks, so a machine behind NAT can chat. The bot token makes
the source authentic: only Telegram answers ``api.telegram.org`` over TLS, and only for
this bot. Every update is parsed exactly as a webhook's (:class:`TelegramPlatform`),
so identities, commands, the allow-list and the replay guard are the same.

Offsets: an update counts as confirmed once ``getUpdates`` is called with a higher
offset. The next offset is saved in the transaction that stores the update's inbox row
(:meth:`WebhookServer.take`), and a restart asks from the saved offset: an update is
stored and confirmed, or neither and fetched again (and then still de-duplicated by
the replay guard), so a crash at any moment loses and repeats nothing. An offset saved
more than a day ago is not used: Telegram keeps an update for 24 hours, so none it
could skip is left, and update ids restart at random after a quiet week. For the same
reason the offset never moves backwards (a lower update id arriving later is answered
but not confirmed again) unless it has not moved for a day.

An update that cannot be parsed is skipped, never a reason to stop: every number in it
is bounded (:func:`~picobot.channels.webhook.common.load_json`, ``required``), and the
log line of each kind of skip is rate-limited.

At start a webhook set for the bot is deleted (``deleteWebhook``, keeping the updates
waiting) and the log says so: Telegram refuses ``getUpdates`` (409) while one is set.
Errors back off (1 s doubling up to a minute, or ``parameters.retry_after`` of a 429),
and a poll that brings nothing new is followed by the next no sooner than
``floor_secs`` (1 s) after it started, so a Bot API answering ``[]`` at once is not
called in a hot loop;
a 409 later (someone set a webhook again, or a second process polls) checks the
webhook again before the next poll.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeGuard

import aiohttp

from picobot.backoff import Backoff
from picobot.channels.webhook.base import AnswerTooLarge, PlatformMessage, WebhookError
from picobot.channels.webhook.common import MAX_INT, ApiAnswer, encoded_size
from picobot.channels.webhook.connections.base import (
    ATTEMPT_FLOOR_SECS,
    DEFAULT_BACKOFF,
    PlatformConnection,
    Sink,
)
from picobot.channels.webhook.platforms.telegram import TelegramPlatform, retry_after
from picobot.logsafe import loggable
from picobot.store.channels.channel_state import ChannelState

log = logging.getLogger(__name__)

OFFSET_MAX_AGE_SECS = 86_400
"""A saved offset older than this is not used (Telegram keeps updates for 24 hours)."""
EXTRA_WAIT_SECS = 15
"""How much longer than the long-poll timeout a getUpdates call may take."""
ALLOWED_UPDATES = ["message"]
"""The only update kind that carries a chat message PicoBot answers."""
BATCH = 100
"""Updates asked for per getUpdates call (Telegram's maximum)."""
ENVELOPE_BYTES = 65_536
"""Room in a getUpdates answer besides its updates."""


class TelegramPoller(PlatformConnection[TelegramPlatform]):
    """Fetches a bot's updates with getUpdates and hands them to the webhook core."""

    mode = "polling"

    def __init__(
        self,
        platform: TelegramPlatform,
        sink: Sink,
        state: ChannelState,
        *,
        backoff: Backoff = DEFAULT_BACKOFF,
        floor_secs: float = ATTEMPT_FLOOR_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(platform, sink, state, backoff=backoff, floor_secs=floor_secs)
        self._timeout = platform.settings.poll_timeout_secs
        self._clock = clock
        self._offset: int | None = None
        self._offset_at = 0.0
        self._offset_loaded = False
        self._webhook_checked = False
        self._one_by_one = False
        self._skipped = self.log_summary(log, "telegram: skipped updates")
        self._failed = self.log_summary(log, "telegram: updates that failed", level=logging.ERROR)

    async def session(self, http: aiohttp.ClientSession) -> None:
        """Delete a webhook if one is set, then poll until something fails."""
        if not self._webhook_checked:
            await self._delete_webhook(http)
            self._webhook_checked = True
        if not self._offset_loaded:
            self._offset = await self.state.offset(
                self.platform.name, max_age_secs=OFFSET_MAX_AGE_SECS
            )
            self._offset_at = self._clock()
            self._offset_loaded = True
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            if not await self._poll(http):
                # Nothing new: an empty answer before its timeout, or only what cannot
                # be confirmed. Telegram holds an empty poll for the timeout (at least
                # 1 s); a platform that answers at once is not asked again at once.
                await self.pause(started)

    async def _delete_webhook(self, http: aiohttp.ClientSession) -> None:
        answer = await self._call(http, "getWebhookInfo", {})
        url = answer.field("result", "url")
        if not isinstance(url, str) or not url:
            log.info("telegram: no webhook is set for the bot; long polling")
            return
        await self._call(http, "deleteWebhook", {"drop_pending_updates": False})
        # The webhook's URL is not logged: it may carry a secret path.
        log.warning(
            "telegram: the bot had a webhook set; deleted it (deleteWebhook) so that long"
            ' polling gets the updates (those waiting are kept). Set mode = "webhook" to'
            " use webhooks again."
        )

    async def _poll(self, http: aiohttp.ClientSession) -> bool:
        """One getUpdates call; whether it moved the offset (brought something new)."""
        payload: dict[str, Any] = {"timeout": self._timeout, "allowed_updates": ALLOWED_UPDATES}
        if self._offset is not None:
            payload["offset"] = self._offset
        # One update over the limit makes a whole batch too long to read: it is then
        # fetched alone (and skipped), not asked for again in a batch for ever.
        payload["limit"] = 1 if self._one_by_one else BATCH
        try:
            answer = await self._call(http, "getUpdates", payload, long=True)
        except AnswerTooLarge:
            self._one_by_one = True
            raise
        self._one_by_one = False
        await self._status.enter("connected")
        updates = answer.field("result")
        if not isinstance(updates, list) or not updates:
            return False
        messages, last = self._parse(updates)
        if last is None:
            return False
        next_offset = self._next_offset(last)
        await self.sink.take(self.platform, messages, next_offset=next_offset)
        if next_offset is not None:
            self._offset, self._offset_at = next_offset, self._clock()
        await self._status.received()
        return next_offset is not None

    def _next_offset(self, last: int) -> int | None:
        """The offset past update ``last``, or None where it would move backwards.

        A lower update id than one already confirmed never takes the offset back (that
        would ask again for what is confirmed), unless the offset has not moved for a
        day: Telegram has forgotten everything it covers, and restarts update ids at
        random after a quiet week.
        """
        candidate = last + 1
        if self._offset is None or candidate > self._offset:
            return candidate
        if self._clock() - self._offset_at > OFFSET_MAX_AGE_SECS:
            return candidate
        return None

    def _parse(self, updates: list[Any]) -> tuple[list[PlatformMessage], int | None]:
        """The chat messages of ``updates`` and the highest update id among them.

        Whatever cannot be parsed is skipped and confirmed with the others (or Telegram
        would send it for ever); only an update without a usable ``update_id`` (not an
        integer from 0 to 2^53 - 1) cannot be confirmed, and moves no offset. The log
        names no content, and a line a platform could repeat is logged once a minute
        per kind, then counted.
        """
        messages: list[PlatformMessage] = []
        last: int | None = None
        for update in updates:
            number = update.get("update_id") if isinstance(update, dict) else None
            if not _usable_id(number):
                self._skipped.note("id", "telegram: skipped an update without a valid update_id")
                continue
            last = number if last is None else max(last, number)
            size = encoded_size(update)
            if size > self.sink.max_body_bytes:
                # As a webhook body over the limit is refused: never stored whole.
                limit = self.sink.max_body_bytes
                self._skipped.note(
                    "size", "telegram: skipped update %d: over %d bytes", number, limit
                )
                continue
            try:
                messages += self.platform.parse(json.dumps(update).encode())
            except WebhookError as exc:
                reason = loggable(exc.reason)
                self._skipped.note(reason, "telegram: skipped update %d: %s", number, reason)
            except Exception as exc:
                # A bug of ours, not the platform's: one update must not stop polling.
                failed = type(exc).__name__
                self._failed.note(failed, "telegram: update %d failed", number, exc_info=True)
        return messages, last

    async def _call(
        self, http: aiohttp.ClientSession, method: str, payload: dict[str, Any], long: bool = False
    ) -> ApiAnswer:
        """Call ``method``; raise a DeliveryError (scrubbed) unless Telegram says ok."""
        url, api = self.platform.method(method)
        deadline = aiohttp.ClientTimeout(total=self._timeout + EXTRA_WAIT_SECS if long else 30)
        # Room for a full batch of updates each as large as a webhook body may be.
        max_bytes = BATCH * self.sink.max_body_bytes + ENVELOPE_BYTES
        answer = await api.post(http, url, payload, deadline=deadline, max_bytes=max_bytes)
        if answer.ok and answer.field("ok") is True:
            return answer
        if answer.status == 409:
            # A webhook was set again, or another process polls this bot.
            self._webhook_checked = False
        raise api.failure(
            answer, answer.field("description"), retry=True, retry_after=retry_after(answer)
        )


def _usable_id(number: object) -> TypeGuard[int]:
    """Whether ``number`` is an update id an offset can be built from."""
    return isinstance(number, int) and not isinstance(number, bool) and 0 <= number <= MAX_INT

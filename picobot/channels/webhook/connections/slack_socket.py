"""Slack Socket Mode (``[channels.webhook.slack] mode = "socket"``).

PicoBot opens the connection: ``apps.connections.open`` with the app-level token
(``xapp-...``) returns a one-time WebSocket URL, and Slack sends events down it
instead of POSTing them to a public address. The app-level token makes the source
authentic (only Slack hands out the URL, over TLS, for this app); the events inside
are the Events API's own, parsed by :class:`SlackPlatform` exactly as a webhook's, so
identities (``slack:<team>:<user>``), the allow-list and the replay guard are the same.
When Slack's ``hello`` names the app, an event for another app is refused.

Every envelope is acknowledged (``{"envelope_id": ...}``) right after its message is
stored in the inbox, well within Slack's 3 seconds (an event larger than a webhook
body may be, ``[channels.webhook] max_body_bytes``, is acknowledged and skipped); one
that could not be stored is not acknowledged, so Slack sends it again.

A ``disconnect`` envelope (Slack rotates connections every few hours) opens a new
connection at once, but never sooner than
``floor_secs`` (1 s) after the last one was opened: a Slack that says ``disconnect``
on every connect is not reconnected to in a hot loop. A dropped connection or a
failed open is retried with backoff (1 s doubling up to a minute, or Slack's
Retry-After). The lines a platform can make us repeat are logged once a minute per
kind, then counted.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from picobot.backoff import Backoff
from picobot.channels.webhook.base import WebhookError
from picobot.channels.webhook.common import encoded_size, load_json
from picobot.channels.webhook.connections.base import (
    ATTEMPT_FLOOR_SECS,
    DEFAULT_BACKOFF,
    PlatformConnection,
    Sink,
)
from picobot.channels.webhook.platforms.slack import SlackPlatform
from picobot.errors import UNREADABLE_JSON
from picobot.logsafe import loggable
from picobot.store.channels.channel_state import ChannelState

log = logging.getLogger(__name__)

OPEN_TIMEOUT_SECS = 10.0
MAX_ENVELOPE_BYTES = 1_048_576
"""Largest frame read, unless four times ``[channels.webhook] max_body_bytes`` is more
(an event is a few KiB). An event over ``max_body_bytes`` itself is acknowledged and
skipped, as a webhook body that large is refused."""


class SlackSocket(PlatformConnection[SlackPlatform]):
    """A Socket Mode connection that hands Slack's events to the webhook core."""

    mode = "socket"

    def __init__(
        self,
        platform: SlackPlatform,
        sink: Sink,
        state: ChannelState,
        *,
        backoff: Backoff = DEFAULT_BACKOFF,
        floor_secs: float = ATTEMPT_FLOOR_SECS,
    ) -> None:
        super().__init__(platform, sink, state, backoff=backoff, floor_secs=floor_secs)
        self._app_id: str | None = None
        self._reconnects = self.log_summary(log, "slack: reconnects asked", level=logging.INFO)
        self._skipped = self.log_summary(log, "slack: skipped envelopes")

    async def session(self, http: aiohttp.ClientSession) -> None:
        """One connection: open it, read envelopes; return on ``disconnect``."""
        await self._status.enter("connecting")
        url, headers, api = self.platform.socket_opener()
        answer = await api.post(http, url, {}, headers)
        ws_url = answer.field("url")
        if not answer.ok or answer.field("ok") is not True or not isinstance(ws_url, str):
            error = answer.field("error")
            raise api.failure(answer, error if isinstance(error, str) else None, retry=True)
        try:
            # Frames somewhat over the body limit are read, so that their envelope can be
            # acknowledged and skipped; a larger one ends the connection unread.
            max_frame = max(MAX_ENVELOPE_BYTES, 4 * self.sink.max_body_bytes)
            async with connect(ws_url, open_timeout=OPEN_TIMEOUT_SECS, max_size=max_frame) as ws:
                async for raw in ws:
                    if not await self._envelope(ws, raw):
                        return
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI, ConnectionClosed) as exc:
            # The URL carries a one-time ticket: name the kind of failure only.
            reason = f"Slack Socket Mode connection failed: {type(exc).__name__}"
            raise api.error(reason, retry=True) from None
        raise api.error("Slack closed the Socket Mode connection", retry=True)

    async def _envelope(self, ws: ClientConnection, raw: str | bytes) -> bool:
        """Handle one envelope; False when Slack asks us to reconnect."""
        try:
            # Bounded numbers: a 5,000-digit one makes a field bad, not the envelope
            # unreadable (and so never acknowledged).
            envelope = load_json(raw)
        except UNREADABLE_JSON:
            self._skipped.note("json", "slack: ignored a Socket Mode frame that is not JSON")
            return True
        if not isinstance(envelope, dict):
            return True
        kind = envelope.get("type")
        if kind == "hello":
            info = envelope.get("connection_info")
            app = info.get("app_id") if isinstance(info, dict) else None
            self._app_id = app if isinstance(app, str) and app else None
            await self._status.enter("connected")
            return True
        if kind == "disconnect":
            reason = loggable(str(envelope.get("reason")))
            self._reconnects.note("disconnect", "slack: Slack asked to reconnect (%s)", reason)
            return False
        envelope_id = envelope.get("envelope_id")
        if not isinstance(envelope_id, str) or not envelope_id:
            return True
        if kind == "events_api":
            await self._event(envelope.get("payload"))
        # Stored (or not ours to answer): acknowledge, so Slack does not send it again.
        await ws.send(json.dumps({"envelope_id": envelope_id}))
        return True

    async def _event(self, payload: Any) -> None:
        """Admit the chat message of an events_api payload; a StoreUnavailable escapes
        (the envelope is then not acknowledged and comes again)."""
        if not isinstance(payload, dict):
            self._skipped.note("payload", "slack: skipped an events_api envelope without a payload")
            return
        if encoded_size(payload) > self.sink.max_body_bytes:
            # As a webhook body over the limit is refused: never stored whole.
            limit = self.sink.max_body_bytes
            self._skipped.note("size", "slack: skipped an event over %d bytes", limit)
            return
        app = payload.get("api_app_id")
        if self._app_id is not None and app != self._app_id:
            self._skipped.note("app", "slack: refused an event for another app: %s", loggable(app))
            return
        try:
            messages = self.platform.parse(json.dumps(payload).encode())
        except WebhookError as exc:
            reason = loggable(exc.reason)
            self._skipped.note(reason, "slack: skipped a malformed event: %s", reason)
            return
        await self._status.received()
        await self.sink.take(self.platform, messages)

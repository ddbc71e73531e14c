"""/export: the caller's own data, from the chat.

In the terminal UI (channel ``tui``, same machine as the data) the JSONL export (the
admin export's format, docs/export-import.md) is written to a new 0600 file under the
data directory and its path shown; purges and retention delete it
(:mod:`picobot.store.erasure.export_files`). Over WebSocket the caller gets a
single-use download token (:mod:`picobot.services.export_tokens`) for the WebSocket
server's ``GET /export/<token>``. On Telegram, Slack and WhatsApp the file is written
the same way, sealed with the user's key while it waits (opened in memory to be
uploaded; :mod:`picobot.store.keys.sealed_files`), and handed over as a document in
the chat (a DOCUMENT event: the webhook core sends it through the platform's file
API, then deletes it; see :mod:`picobot.channels.webhook.documents`), in a one-to-one
chat only: in a group everyone would receive it, so the user is asked to send /export
in a private chat.
Other channels (the generic webhook, the OpenAI-compatible endpoint) cannot carry a
file: they are told so, and how to get the export.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from picobot.kernel.commands import CommandCall, CommandRouter
from picobot.messages import Identity, Outbound, document, notice
from picobot.services.export import ExportService

FILE_CHANNELS = frozenset({"tui"})
"""Channels whose user sits at the machine holding the data directory."""
TOKEN_CHANNELS = frozenset({"ws"})
"""Channels whose server offers the download of a token (``GET /export/<token>``)."""
DOCUMENT_CHANNELS = frozenset({"telegram", "slack", "whatsapp"})
"""Channels that hand the file over in the chat, through the platform's file API."""
EXPORT_PATH = "/export/"
ELSEWHERE = (
    "Use /export in the terminal UI or over WebSocket, or ask the operator for your "
    "export (picobot export --user, or the admin API); it holds everything stored about you."
)
"""Where else a user gets their export, for a chat that cannot carry it."""


class ExportCommands:
    """/export over the export service; the caller's own data only."""

    def __init__(self, export: ExportService, clock: Callable[[], float] = time.time) -> None:
        self._export = export
        self._clock = clock

    def register(self, router: CommandRouter) -> None:
        """Add /export to a router."""
        router.add("export", "/export", "get everything stored about you (JSONL)", self.export)

    async def export(self, call: CommandCall) -> list[Outbound]:
        """Write the caller's export where the channel can hand it over, or say why not."""
        ident = call.identity
        if ident.channel in TOKEN_CHANNELS:
            if (await self._export.count(ident.user_id)).empty:
                return [notice("Nothing is stored about you yet.", call.session_id)]
            token = self._export.tokens.issue(ident.user_id)
            minutes = round(self._export.tokens.ttl_secs / 60)
            return [
                notice(
                    f"Download your data (JSON Lines) from this server at {EXPORT_PATH}{token} "
                    f"(HTTP GET, no API key): once, within {minutes} minutes. Keep the link to "
                    "yourself: it is the only key to your export.",
                    call.session_id,
                )
            ]
        if ident.channel not in FILE_CHANNELS | DOCUMENT_CHANNELS:
            return [
                notice(
                    f"This chat cannot receive files, so /export cannot send your data here. "
                    f"{ELSEWHERE}",
                    call.session_id,
                )
            ]
        if ident.channel in DOCUMENT_CHANNELS and not one_to_one(ident):
            return [
                notice(
                    "Your export holds everything stored about you, and everyone in this "
                    "chat would receive it: send /export in a private chat with me instead.",
                    call.session_id,
                )
            ]
        if (await self._export.count(ident.user_id)).empty:
            return [notice("Nothing is stored about you yet.", call.session_id)]
        # A platform document waits on disk until sent: sealed with the user's key.
        # The terminal UI's file is for its user to read: plain.
        sent = ident.channel in DOCUMENT_CHANNELS
        path, stats = await self._export.write_file(ident.user_id, self._clock(), sealed=sent)
        if sent:
            caption = (
                f"Everything stored about you, as JSON Lines: {stats.sessions} sessions, "
                f"{stats.messages} messages, {stats.memories} notes, {stats.facts} facts. "
                "Keep it to yourself; this server deletes its copy once it is sent."
            )
            return [document(str(path), caption, call.session_id)]
        return [
            notice(
                f"Your data is in {path} (JSON Lines, readable only by this account: "
                f"{stats.sessions} sessions, {stats.messages} messages, {stats.memories} "
                f"notes, {stats.facts} facts). It is deleted after a day, or with /purge user.",
                call.session_id,
            )
        ]


def one_to_one(ident: Identity) -> bool:
    """Whether the chat is the user's private chat with the bot, where a document reaches
    no one else. Telegram: a private chat's id is the user's id (groups are negative);
    Slack: a direct message's channel id starts with ``D``; WhatsApp: every chat is one
    person's. Anything else is not known to be private, so no."""
    if ident.channel == "whatsapp":
        return True
    if ident.channel == "telegram":
        return ident.user_id == f"telegram:{ident.chat_id}"
    if ident.channel == "slack":
        return ident.chat_id.startswith("D")
    return False

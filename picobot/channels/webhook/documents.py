"""Files handed over in a chat: a user's ``/export`` as a platform document.

``/export`` on a messaging platform writes the user's export file under the data
directory (``exports/``, 0600) and emits a DOCUMENT event naming it
(:mod:`picobot.commands.export`). The webhook core then:

- queues it (:func:`queued`) as a reply that names the file, never its content, when
  the platform has a file API and the file is within its limit; otherwise the file is
  deleted at once and the user gets a text saying why and where else to get the data;
- sends it (:func:`send`) through :meth:`Platform.send_document`, which opens the file
  again at every attempt (it is sealed with the user's key on disk and opened in
  memory only), so a retry sends the same bytes and a purge that deleted the
  file meanwhile stops the send (a final failure: "the file is gone");
- deletes it (:func:`discard`) once it was sent or given up on. A purge or retention
  that deletes the queued reply deletes the file with it
  (:mod:`picobot.store.channels.webhook_purge`), and retention deletes any export file
  older than a day (:mod:`picobot.store.erasure.export_files`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import BinaryIO

import aiohttp

from picobot.channels.webhook.base import DeliveryError, Document, Platform
from picobot.channels.webhook.common import ReplyApi, split_text
from picobot.commands.export import ELSEWHERE
from picobot.messages import Outbound
from picobot.store.channels.webhooks import OutboundItem, QueuedDocument
from picobot.store.erasure.export_files import (
    delete_export_file,
    export_dir,
    export_file,
    shown_name,
)
from picobot.store.keys.sealed_files import clear_size, open_sealed
from picobot.store.keys.sealing import Sealer

log = logging.getLogger(__name__)

JSONL_TYPE = "application/x-ndjson"
"""The media type an export is uploaded as where the platform takes any."""
UPLOAD_TIMEOUT = aiohttp.ClientTimeout(total=300, sock_connect=30)
"""The deadline of one upload: 50 MB at about 1.5 Mbit/s (a reply's is 30 seconds)."""
MB = 1_000_000
GONE = "the export file is gone (purged, or older than a day)"


def queued(platform: Platform, event: Outbound, data_dir: Path) -> str | QueuedDocument:
    """What to queue for a DOCUMENT event: the document, or the text that replaces it
    (the file then deleted) when this platform cannot take it."""
    path = Path(event.path or "")
    name = path.name
    if path.parent != export_dir(data_dir) or export_file(data_dir, name) is None:
        # Only export files are ever handed over: anything else is a programming error.
        log.error("%s: a document that is no export file was not sent", platform.name)
        return f"Sorry, your export could not be sent here. {ELSEWHERE}"
    try:
        size = clear_size(path)
    except FileNotFoundError:
        return "Your export was deleted before it could be sent. Send /export again."
    limit = platform.max_document_bytes
    if limit is None:
        delete_export_file(data_dir, name)
        return f"This chat cannot receive files, so your export is not sent here. {ELSEWHERE}"
    if size > limit:
        delete_export_file(data_dir, name)
        return (
            f"Your export is {megabytes(size)}, more than the {megabytes(limit)} a file in "
            f"this chat may have, so it is not sent here. {ELSEWHERE}"
        )
    return QueuedDocument(event.text, name)


async def send(
    platform: Platform,
    session: aiohttp.ClientSession,
    item: OutboundItem,
    data_dir: Path,
    sealer: Sealer,
) -> None:
    """Hand over the export file of a queued document reply (opened with ``sealer``);
    raise DeliveryError."""
    path = export_file(data_dir, item.document or "")
    try:
        size = clear_size(path) if path is not None else -1
    except FileNotFoundError:
        size = -1
    if path is None or size < 0:
        raise DeliveryError(f"{platform.name} document: {GONE}", retry=False)
    name = shown_name(path.name)
    document = Document(path, name, item.text, size, sealer)
    await platform.send_document(session, item.reply_to, document)


def discard(item: OutboundItem, data_dir: Path) -> None:
    """Delete the export file of a document reply (sent, given up on, or purged)."""
    if item.document is not None:
        delete_export_file(data_dir, item.document)


def open_document(document: Document, limit: int, api: ReplyApi) -> BinaryIO:
    """The document's file opened for an upload; a final DeliveryError when it is over
    ``limit`` bytes or gone (a purge deleted it since it was queued)."""
    if document.size > limit:
        raise api.error(
            f"{api.service}: the file is over {megabytes(limit)} ({megabytes(document.size)})",
            retry=False,
        )
    try:
        return open_sealed(document.path, document.sealer)
    except FileNotFoundError:  # KeyGone too: the user was purged since
        raise api.error(f"{api.service}: {GONE}", retry=False) from None


def caption(text: str, limit: int) -> str:
    """``text`` as a caption of at most ``limit`` UTF-16 units (its first part)."""
    parts = split_text(text, limit)
    return parts[0] if parts else ""


def megabytes(size: int) -> str:
    """A size for people: ``12.3 MB``, or ``950 bytes`` below a tenth of a megabyte."""
    return f"{size / MB:.1f} MB" if size >= MB // 10 else f"{size:,} bytes"

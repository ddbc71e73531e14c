"""The replay guard: a content-free record of every platform message ever accepted.

The inbox's ``UNIQUE(platform, message_id)`` de-duplicates only while its row exists,
and a purge deletes the row with the user's data. Without more, a captured signed
request replayed after ``/purge user`` would be accepted as new: stored, answered and
exported again. ``webhook_seen`` (migration m013) closes that gap. Each row holds a
32-byte key and the time it was seen, nothing else:

- The key is an HMAC-SHA256 of ``<platform>:<message id>`` under a key derived from
  the platform's own verification secret (:func:`picobot.channels.webhook.signing.
  seen_key`), so a message id built from a phone number or a small counter (Telegram's
  ``<chat>:<n>``) cannot be confirmed by hashing guesses without that secret, which
  lives in the environment, never in the data directory.
- Purges leave it: it holds no content and no user id, and deleting it would let the
  purged data come back through a replay.
- Retention prunes rows older than :data:`SEEN_KEEP_SECS`, longer than any message can
  be accepted: every platform message is refused as stale by then (its signed time is
  older than ``max_message_age_secs``, at most 7 days, or Slack's and the generic
  webhook's signed timestamp is outside their window of minutes).
"""

from __future__ import annotations

import hashlib
import sqlite3

from picobot.store.db import Database

DAY_SECS = 86_400
MAX_MESSAGE_AGE_SECS = 7 * DAY_SECS
"""The most ``[channels.webhook] max_message_age_secs`` may be (WhatsApp's redelivery
window, the longest of the platforms)."""
SEEN_KEEP_SECS = MAX_MESSAGE_AGE_SECS + DAY_SECS
"""How long a de-duplication record is kept: the longest accepted message age plus a
day for clocks that disagree."""


def plain_key(platform: str, message_id: str) -> bytes:
    """An unkeyed record key: SHA-256 of ``<platform>:<message id>``.

    For callers that have no platform secret (tests, tools). The webhook server always
    passes the platform's keyed one.
    """
    return hashlib.sha256(f"{platform}:{message_id}".encode()).digest()


def mark_seen(conn: sqlite3.Connection, key: bytes, now: float) -> bool:
    """Record ``key`` as seen now; False if it was seen before (a replay or redelivery).

    Runs in the caller's write transaction, so the record and the inbox row it guards
    are committed together or not at all.
    """
    cur = conn.execute(
        "INSERT INTO webhook_seen (key, seen_at) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
        (key, now),
    )
    return cur.rowcount == 1


class SeenRecords:
    """Counting and pruning the de-duplication records (purges never touch them)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def count(self) -> int:
        """How many records are kept."""
        row = await self._db.fetchone("SELECT COUNT(*) FROM webhook_seen")
        return int(row[0]) if row else 0

    async def prune(self, cutoff: float) -> int:
        """Delete the records seen before ``cutoff``; return how many."""
        return await self._db.write(
            lambda conn: (
                conn.execute("DELETE FROM webhook_seen WHERE seen_at < ?", (cutoff,)).rowcount
            )
        )

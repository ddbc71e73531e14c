"""The ``pending_purges`` table: purges planned and waiting for their y/n answer.

Every instance sharing the store reads the same rows, so a confirmation token issued by
one instance is answered on any other, and a chat's "y" counts wherever its turn runs.
Taking a row is one ``DELETE ... RETURNING``: of two instances answering the same token
at once, one gets it and the other finds nothing, so a purge runs once.

- The token is a bearer secret and is never stored: rows are keyed by its SHA-256
  (16 random bytes leave nothing to guess from the hash).
- A row holds the asking actor's id, the chat it was asked from, the user whose data it
  is (when the scope names one) and the plan as JSON: ids, counts and a cutoff, never
  content (:mod:`picobot.privacy.controller` writes and reads it).
- A purge of a user deletes the rows that user asked for or that concern them; the rest
  go when taken, when their actor asks again (one pending purge per actor), or once
  they are :data:`KEPT_AFTER_EXPIRY_SECS` past their expiry (at the next request, and
  by retention; no answer finds them meanwhile).
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass

from picobot.store.db import Database

KEPT_AFTER_EXPIRY_SECS = 86_400.0
"""How long an expired purge is kept: a late y/yes in the chat is told that nothing was
deleted, rather than taken for chat, and a late confirmation through the admin API is
told it expired rather than that the token is unknown."""

_COLUMNS = "token_hash, actor_id, operator, channel, chat_id, user_id, plan, expires_at"


def token_key(token: str) -> str:
    """The stored key of a confirmation token (its SHA-256, hex)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredPurge:
    """One pending purge as stored; ``plan`` is the controller's JSON."""

    key: str
    actor_id: str
    operator: bool
    origin: tuple[str, str] | None
    user_id: str | None
    plan: str
    expires_at: float


def _stored(row: sqlite3.Row) -> StoredPurge:
    key, actor_id, operator, channel, chat_id, user_id, plan, expires_at = tuple(row)
    origin = (channel, chat_id) if channel is not None else None
    return StoredPurge(key, actor_id, bool(operator), origin, user_id, plan, expires_at)


def delete_user_pending(conn: sqlite3.Connection, user_id: str) -> int:
    """Delete the pending purges ``user_id`` asked for or that concern them, inside the
    caller's write (a purge of the user); how many."""
    return conn.execute(
        "DELETE FROM pending_purges WHERE actor_id = ? AND operator = 0 OR user_id = ?",
        (user_id, user_id),
    ).rowcount


_ASKED_FROM = (
    "FROM pending_purges WHERE actor_id = ? AND operator = ? AND channel = ? AND chat_id = ?"
    " AND expires_at >= ?"
)


def asked_from_in(
    conn: sqlite3.Connection, actor_id: str, operator: bool, origin: tuple[str, str], now: float
) -> bool:
    """Whether :meth:`PendingPurges.asked_from` would find a row, inside the caller's
    transaction (the write that would store the chat's next message)."""
    args = _asked_from_args(actor_id, operator, origin, now)
    return conn.execute(f"SELECT 1 {_ASKED_FROM} LIMIT 1", args).fetchone() is not None


def _asked_from_args(
    actor_id: str, operator: bool, origin: tuple[str, str], now: float
) -> tuple[str, int, str, str, float]:
    return (actor_id, int(operator), origin[0], origin[1], now - KEPT_AFTER_EXPIRY_SECS)


class PendingPurges:
    """The pending purges of every instance on this store (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def hold(self, pending: StoredPurge, now: float) -> None:
        """Store ``pending`` as its actor's only pending purge, dropping rows long expired."""

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM pending_purges WHERE actor_id = ? AND operator = ? OR expires_at < ?",
                (pending.actor_id, int(pending.operator), now - KEPT_AFTER_EXPIRY_SECS),
            )
            channel, chat_id = pending.origin or (None, None)
            conn.execute(
                f"INSERT INTO pending_purges ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
                (
                    pending.key,
                    pending.actor_id,
                    int(pending.operator),
                    channel,
                    chat_id,
                    pending.user_id,
                    pending.plan,
                    pending.expires_at,
                ),
            )

        await self._db.write(run)

    async def asked_from(
        self, actor_id: str, operator: bool, origin: tuple[str, str], now: float
    ) -> StoredPurge | None:
        """The actor's pending purge asked from the chat ``origin``, if any (expired
        ones too, until they are pruned)."""
        row = await self._db.fetchone(
            f"SELECT {_COLUMNS} {_ASKED_FROM}", _asked_from_args(actor_id, operator, origin, now)
        )
        return None if row is None else _stored(row)

    async def take(self, key: str, actor_id: str, operator: bool, now: float) -> StoredPurge | None:
        """Delete and return the pending purge ``key`` of this actor; None when there is
        none (unknown, taken already, pruned, or another actor's, which then stays)."""
        row = await self._db.write(
            lambda conn: conn.execute(
                f"DELETE FROM pending_purges WHERE token_hash = ? AND actor_id = ?"  # noqa: S608
                f" AND operator = ? AND expires_at >= ? RETURNING {_COLUMNS}",
                (key, actor_id, int(operator), now - KEPT_AFTER_EXPIRY_SECS),
            ).fetchone()
        )
        return None if row is None else _stored(row)

    async def drop(self, key: str) -> None:
        """Delete the pending purge ``key`` (an expired one answered by other chat)."""
        await self._db.execute_write("DELETE FROM pending_purges WHERE token_hash = ?", (key,))

    async def prune(self, now: float) -> int:
        """Delete the rows more than :data:`KEPT_AFTER_EXPIRY_SECS` past expiry (retention)."""
        return int(
            await self._db.write(
                lambda conn: (
                    conn.execute(
                        "DELETE FROM pending_purges WHERE expires_at < ?",
                        (now - KEPT_AFTER_EXPIRY_SECS,),
                    ).rowcount
                )
            )
        )

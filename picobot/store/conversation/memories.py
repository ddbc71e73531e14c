"""User memories: short keyed notes a user asked the bot to keep.

A note's key (its name) and content are sealed with its owner's key; the note is found
by its name through ``key_tag``, the name's lookup tag
(:func:`picobot.store.keys.sealing.tag_matches`).

Every method takes the owner's ``user_id`` explicitly and touches only that owner's
rows; there is no query across users. Shared (global) memories are stored under the
reserved owner :data:`GLOBAL_USER`, which no channel can produce (channel user ids
always start with their channel's name). The key and content rules live here as pure
functions so the memory tool, the slash commands and the CLI enforce the same ones.
"""

from __future__ import annotations

import builtins
import re
import sqlite3
import time
from dataclasses import dataclass

from picobot.errors import UserError
from picobot.messages import storable
from picobot.store.conversation.events import record_event_in
from picobot.store.conversation.messages import SessionGone
from picobot.store.db import Database, Row
from picobot.store.keys.sealing import tag_matches

GLOBAL_USER = "global:shared"
"""Owner id of the shared memories (MemoryRead/MemoryWrite{Global})."""

MAX_KEY_CHARS = 64
RESERVED_PREFIXES = ("system_", "internal_")
KEY_PATTERN = "^[a-z][a-z0-9_]*$"
"""What a memory key looks like (besides its length and the reserved prefixes)."""
_KEY_RE = re.compile(KEY_PATTERN)


@dataclass(frozen=True, slots=True)
class Memory:
    """One stored memory."""

    id: int
    user_id: str
    key: str
    content: str
    created_at: float
    updated_at: float
    sensitive: bool = False
    """Kept out of recall, the prompt and the model's tool; still the user's (listed,
    exported, purged)."""


def validate_key(key: str) -> str:
    """Return the key without surrounding spaces, or raise UserError naming the broken rule.

    Keys are lowercase identifiers (``^[a-z][a-z0-9_]*$``, at most 64 characters) so
    they are easy to type in ``/forget`` and cannot smuggle markup into a prompt; the
    ``system_`` and ``internal_`` prefixes are reserved for PicoBot itself.
    """
    key = key.strip()
    if not key:
        raise UserError("A memory needs a key, e.g. favourite_color.")
    if len(key) > MAX_KEY_CHARS:
        raise UserError(
            f"Memory key is {len(key)} characters long; at most {MAX_KEY_CHARS} are allowed."
        )
    if not _KEY_RE.fullmatch(key):
        raise UserError(
            f"Memory key {key[:MAX_KEY_CHARS]!r} is not allowed: use lowercase letters, "
            "digits and underscores, starting with a letter (e.g. favourite_color)."
        )
    for prefix in RESERVED_PREFIXES:
        if key.startswith(prefix):
            raise UserError(f"Memory keys starting with {prefix!r} are reserved; pick another.")
    return key


def validate_content(content: str, max_chars: int) -> str:
    """Return the stripped content, or raise UserError if it is empty, too long or
    not storable (lone surrogates: a JSON escape, or argv bytes that are not UTF-8)."""
    content = content.strip()
    if not content:
        raise UserError("A memory needs some content to remember.")
    if not storable(content):
        raise UserError(
            "Memory content is not valid Unicode text (typed in an encoding other than UTF-8?)."
        )
    if len(content) > max_chars:
        raise UserError(
            f"Memory content is {len(content)} characters long; at most {max_chars} are allowed."
        )
    return content


def _cap_message(user_id: str, count: int, max_count: int) -> str:
    if max_count <= 0:
        return "Saving memories is turned off."
    if user_id == GLOBAL_USER:
        return f"There are already {count} shared memories, the most allowed; delete one first."
    return f"You already have {count} memories, the most allowed; /forget one first."


_COLUMNS = (
    "id, user_id, picobot_open(key) AS key, picobot_open(content) AS content, created_at,"
    " updated_at, sensitive"
)
_BY_KEY = "user_id = ?1 AND " + tag_matches("key_tag", "key", "?1", "?2")
"""The note of owner ?1 named ?2."""


def _memory(row: Row) -> Memory:
    return Memory(
        id=int(row["id"]),
        user_id=str(row["user_id"]),
        key=str(row["key"]),
        content=str(row["content"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        sensitive=bool(row["sensitive"]),
    )


def list_memories(
    conn: sqlite3.Connection, user_id: str, limit: int | None, *, sensitive: bool = True
) -> list[Memory]:
    """``user_id``'s memories, most recently updated first (in a reader thread);
    without ``sensitive``, the notes marked sensitive are left out (the prompt's,
    the model tool's listing)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM user_memories WHERE user_id = ?"  # noqa: S608
        " AND (? = 1 OR sensitive = 0) ORDER BY updated_at DESC, id DESC LIMIT ?",
        # LIMIT -1 is SQLite for "no limit".
        (user_id, int(sensitive), -1 if limit is None else max(0, limit)),
    ).fetchall()
    return [_memory(r) for r in rows]


def all_memories(conn: sqlite3.Connection, user_id: str | None, limit: int) -> list[Memory]:
    """Memories of ``user_id`` (None: of every user), most recently updated first."""
    if user_id is not None:
        return list_memories(conn, user_id, limit)
    users = [
        str(r[0])
        for r in conn.execute(
            "SELECT user_id FROM user_memories GROUP BY user_id ORDER BY MAX(updated_at) DESC"
        ).fetchall()
    ]
    found: list[Memory] = []
    for user in users:
        found += list_memories(conn, user, limit - len(found))
        if len(found) >= limit:
            break
    return found


class MemoryRepo:
    """The ``user_memories`` table, always scoped to one owner."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def save(
        self,
        user_id: str,
        key: str,
        content: str,
        *,
        max_count: int,
        now: float | None = None,
        session_id: str | None = None,
        actor: str | None = None,
        sensitive: bool | None = None,
    ) -> Memory:
        """Insert or update ``user_id``'s memory ``key``; return the stored row.

        ``sensitive`` marks the note sensitive (True) or not (False) in the same write;
        None keeps an existing note's mark (a new note is not sensitive).

        With ``session_id`` (a turn's save), only while that session exists, checked in
        the same transaction: a purge deletes its sessions last, then sweeps memories
        once more, so a save racing it either lands before that sweep or raises
        :class:`SessionGone`.

        A new key is refused with a UserError when the owner already has ``max_count``
        memories; updating an existing key always works. The count and the write share
        one ``BEGIN IMMEDIATE`` transaction, so concurrent saves (even from another
        process) cannot push an owner past the cap. ``key`` is stored as given and
        ``content`` redacted (:attr:`Database.redact`), both sealed: validate them
        first with :func:`validate_key` and :func:`validate_content`. Records ``memory.saved``
        (the memory's id, never its key or content; ``actor``: an operator, None for the
        user) in the same transaction.
        """
        ts = time.time() if now is None else now
        content = self._db.redact(content)  # a model's tool call may write it
        async with self._db.transaction() as conn:
            if session_id is not None:
                async with conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)) as c:
                    if await c.fetchone() is None:
                        raise SessionGone(session_id)
            async with conn.execute(
                f"SELECT 1 FROM user_memories WHERE {_BY_KEY}",  # noqa: S608 - constant
                (user_id, key),
            ) as cur:
                exists = await cur.fetchone() is not None
            if exists:
                # A note still named in clear is sealed and tagged here too.
                await conn.execute(
                    "UPDATE user_memories SET key = picobot_seal(?1, ?2),"  # noqa: S608
                    " key_tag = picobot_tag(?1, ?2), content = picobot_seal(?1, ?3),"
                    " updated_at = ?4, sensitive = coalesce(?5, sensitive)"
                    f" WHERE {_BY_KEY}",
                    (user_id, key, content, ts, None if sensitive is None else int(sensitive)),
                )
            else:
                async with conn.execute(
                    "SELECT COUNT(*) FROM user_memories WHERE user_id = ?", (user_id,)
                ) as cur:
                    row = await cur.fetchone()
                count = int(row[0]) if row else 0
                if count >= max_count:
                    raise UserError(_cap_message(user_id, count, max_count))
                await conn.execute(
                    "INSERT INTO user_memories"
                    " (user_id, key, key_tag, content, created_at, updated_at, sensitive)"
                    " VALUES (?1, picobot_seal(?1, ?2), picobot_tag(?1, ?2),"
                    " picobot_seal(?1, ?3), ?4, ?5, ?6)",
                    (user_id, key, content, ts, ts, int(bool(sensitive))),
                )
            async with conn.execute(
                f"SELECT {_COLUMNS} FROM user_memories WHERE {_BY_KEY}",  # noqa: S608
                (user_id, key),
            ) as cur:
                saved = await cur.fetchone()
            assert saved is not None  # written in this very transaction
            await record_event_in(
                conn,
                "memory.saved",
                ts,
                user_id=user_id,
                session_id=session_id,
                actor=actor,
                payload={"memory_id": saved["id"], "created": not exists},
            )
        return _memory(saved)

    async def get(self, user_id: str, key: str) -> Memory | None:
        """``user_id``'s memory ``key``, or None."""
        row = await self._db.fetchone(
            f"SELECT {_COLUMNS} FROM user_memories WHERE {_BY_KEY}",  # noqa: S608
            (user_id, key),
        )
        return _memory(row) if row else None

    async def all(self, user_id: str | None, limit: int) -> builtins.list[Memory]:
        """Memories of ``user_id`` (None: of every user), most recently updated first."""
        return await self._db.read(lambda conn: all_memories(conn, user_id, limit))

    async def list(
        self, user_id: str, limit: int | None = None, *, sensitive: bool = True
    ) -> builtins.list[Memory]:
        """``user_id``'s memories, most recently updated first; at most ``limit``;
        without ``sensitive``, not the notes marked sensitive."""
        return await self._db.read(
            lambda conn: list_memories(conn, user_id, limit, sensitive=sensitive)
        )

    async def set_sensitive(self, user_id: str, key: str, sensitive: bool) -> Memory | None:
        """Mark ``user_id``'s memory ``key`` sensitive or not; the note, or None when
        there is none. Its recall index entry goes or comes back in the same write."""

        def write(conn: sqlite3.Connection) -> Memory | None:
            conn.execute(
                f"UPDATE user_memories SET sensitive = ?3 WHERE {_BY_KEY}"  # noqa: S608
                " AND sensitive <> ?3",
                (user_id, key, int(sensitive)),
            )
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM user_memories WHERE {_BY_KEY}",  # noqa: S608
                (user_id, key),
            ).fetchone()
            return None if row is None else _memory(row)

        return await self._db.write(write)

    async def delete(
        self, user_id: str, key: str, *, actor: str | None = None, now: float | None = None
    ) -> bool:
        """Delete ``user_id``'s memory ``key``; whether it existed.

        Records ``memory.deleted`` at ``now`` (default: the wall clock) by ``actor`` (an
        operator, or None for the user themselves) in the same write.
        """
        async with self._db.transaction() as conn:
            async with conn.execute(
                f"DELETE FROM user_memories WHERE {_BY_KEY} RETURNING id",  # noqa: S608
                (user_id, key),
            ) as cur:
                gone = await cur.fetchone()
            if gone is not None:
                await record_event_in(
                    conn,
                    "memory.deleted",
                    time.time() if now is None else now,
                    user_id=user_id,
                    actor=actor,
                    payload={"memory_id": gone[0]},
                )
        return gone is not None

    async def count(self, user_id: str) -> int:
        """How many memories ``user_id`` has."""
        row = await self._db.fetchone(
            "SELECT COUNT(*) FROM user_memories WHERE user_id = ?", (user_id,)
        )
        return int(row[0]) if row else 0

"""One-time import of a legacy ``sessions.json`` snapshot into the SQLite store.

At startup, if ``<data.dir>/sessions.json`` exists it is validated strictly (the
format is in docs/export-import.md), written in ONE transaction through the normal
tables (so the search index triggers see every message), then renamed to
``sessions.json.migrated``. Any failure leaves the file exactly where it was and the
database unchanged, logs one warning line that never quotes the file's content, and
lets PicoBot start on the database as it is. Sessions whose id is already stored are
skipped, so running the import again over the same file changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    ValidationError,
    model_validator,
)

from picobot.errors import PicobotError
from picobot.store.connection import AsyncConnection
from picobot.store.db import Database

log = logging.getLogger(__name__)

SNAPSHOT_NAME = "sessions.json"
MIGRATED_SUFFIX = ".migrated"


_LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
"""The last second a stored time may hold: every later one fails to convert back to a
date, which broke ``picobot export``, ``picobot sessions`` and the admin API."""


def _timestamp(value: object) -> float:
    """Unix seconds (int or float) or an ISO 8601 string (no offset = UTC) -> unix seconds."""
    if isinstance(value, bool):  # bool is an int subclass; True is not a time
        raise ValueError("a time must be unix seconds or an ISO 8601 string")
    if isinstance(value, int | float):
        ts = float(value)
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("not an ISO 8601 date and time") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        ts = parsed.timestamp()
    else:
        raise ValueError("a time must be unix seconds or an ISO 8601 string")
    if not math.isfinite(ts) or ts < 0 or ts > _LATEST:
        raise ValueError("a time must be between 1970 and the end of year 9999 (UTC)")
    return ts


Timestamp = Annotated[float, BeforeValidator(_timestamp)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=512)]


class _Strict(BaseModel):
    # strict: no "1" -> 1 coercion; forbid: a misspelled key is an error, not ignored data.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class LegacyMessage(_Strict):
    """One message of a legacy session."""

    role: Literal["user", "assistant", "system", "tool"]
    content: str
    created_at: Timestamp | None = None
    seq: int | None = None


class LegacySession(_Strict):
    """One legacy session with its messages."""

    id: Name
    user_id: Name
    channel: Name
    chat_id: Name
    created_at: Timestamp
    last_active: Timestamp | None = None
    parent_session_id: Name | None = None
    messages: list[LegacyMessage] = []

    @model_validator(mode="after")
    def _check(self) -> LegacySession:
        if self.parent_session_id == self.id:
            raise ValueError("a session cannot be its own parent")
        prefix = f"{self.channel}:"
        if not self.user_id.startswith(prefix) or self.user_id == prefix:
            # Every channel names its users so (telegram:1001, slack:T1:U3, ...); a
            # session under another form would belong to no user the chat can reach.
            raise ValueError(f"user_id must be {prefix!r} and the user's id on that channel")
        seqs = [m.seq for m in self.messages]
        given = [s for s in seqs if s is not None]
        if given and len(given) != len(seqs):
            raise ValueError("either every message has a seq or none has")
        if len(set(given)) != len(given):
            raise ValueError("duplicate seq in one session")
        return self

    def ordered_messages(self) -> list[LegacyMessage]:
        """Messages in conversation order: by ``seq`` when given, else as listed."""
        if self.messages and self.messages[0].seq is not None:
            return sorted(self.messages, key=lambda m: m.seq or 0)
        return list(self.messages)


class LegacySnapshot(_Strict):
    """The whole ``sessions.json`` document (format version 1)."""

    version: Literal[1]
    sessions: list[LegacySession]

    @model_validator(mode="after")
    def _check(self) -> LegacySnapshot:
        ids = [s.id for s in self.sessions]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate session id")
        parents = {s.id: s.parent_session_id for s in self.sessions}
        for start in parents:
            seen = {start}
            node = parents[start]
            while node is not None and node in parents:
                if node in seen:
                    raise ValueError("parent_session_id links form a cycle")
                seen.add(node)
                node = parents[node]
        return self


class ImportRejected(PicobotError):
    """The snapshot is well-formed but cannot be applied to this database."""


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What an import attempt did. ``error`` is set (and nothing written) on failure."""

    path: Path
    sessions_imported: int = 0
    messages_imported: int = 0
    skipped: tuple[str, ...] = field(default_factory=tuple)
    migrated_to: Path | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the snapshot was applied (even if every session was skipped)."""
        return self.error is None


def default_estimate(text: str) -> int:
    """ceil(characters / 4), the kernel's default token estimate."""
    return math.ceil(len(text) / 4)


def _load(path: Path) -> LegacySnapshot:
    # Bytes, not text: pydantic's JSON parser reports errors by position without
    # echoing the document, and a non-UTF-8 file fails validation instead of decoding.
    return LegacySnapshot.model_validate_json(path.read_bytes())


def _reason(exc: BaseException) -> str:
    """Why the import failed, in one line that never quotes the file's content."""
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        first = errors[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        return f"{where}: {first['msg']}{more}"
    if isinstance(exc, OSError):
        return f"cannot read it: {exc.strerror or type(exc).__name__}"
    if isinstance(exc, PicobotError | sqlite3.Error):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"unexpected {type(exc).__name__}"


async def import_sessions_json(
    db: Database,
    data_dir: Path,
    *,
    estimator: Callable[[str], int] | None = None,
) -> ImportResult | None:
    """Import ``data_dir/sessions.json`` if it exists; None when there is none.

    Every message passes the store's redactor (:attr:`Database.redact`) before it is
    stored, as live messages do.

    Never raises for a bad file or a failed write: the result's ``error`` says why,
    and the file and the database are left as they were.
    """
    path = data_dir / SNAPSHOT_NAME
    if not path.is_file():
        return None
    estimate = estimator or default_estimate
    try:
        # Parsing a large file is CPU work; keep the event loop responsive meanwhile.
        snapshot = await asyncio.to_thread(_load, path)
        imported, messages, skipped = await _apply(db, snapshot, estimate, db.redact)
    except Exception as exc:  # any failure: keep the file, run on the database as is
        reason = _reason(exc)
        log.warning("legacy import of %s failed, file left in place: %s", path, reason)
        return ImportResult(path=path, error=reason)
    migrated = _rename(path)
    log.info(
        "imported %d sessions (%d messages) from %s%s%s",
        imported,
        messages,
        path,
        f"; skipped {len(skipped)} already stored" if skipped else "",
        f"; renamed it to {migrated.name}" if migrated else "",
    )
    return ImportResult(path, imported, messages, tuple(skipped), migrated)


async def _apply(
    db: Database,
    snapshot: LegacySnapshot,
    estimate: Callable[[str], int],
    redact: Callable[[str], str],
) -> tuple[int, int, list[str]]:
    """Write the snapshot in one transaction; return (sessions, messages, skipped ids)."""
    imported = messages = 0
    skipped: list[str] = []
    in_file = {s.id for s in snapshot.sessions}
    # The newest imported session of each chat becomes its current one (if it has none),
    # so a conversation carries on where the old store left it.
    latest: dict[tuple[str, str, str], tuple[float, str]] = {}
    async with db.transaction() as conn:
        # A parent may come later in the file; check foreign keys once, at commit.
        async with conn.execute("PRAGMA defer_foreign_keys = ON"):
            pass
        for session in snapshot.sessions:
            if await _exists(conn, "SELECT 1 FROM sessions WHERE id = ?", session.id):
                skipped.append(session.id)
                continue
            parent = session.parent_session_id
            if (
                parent is not None
                and parent not in in_file
                and not await _exists(conn, "SELECT 1 FROM sessions WHERE id = ?", parent)
            ):
                raise ImportRejected(f"a session's parent_session_id {parent!r} does not exist")
            count, last_active = await _insert_session(conn, session, estimate, redact)
            imported += 1
            messages += count
            chat = (session.channel, session.chat_id, session.user_id)
            if chat not in latest or latest[chat][0] <= last_active:
                latest[chat] = (last_active, session.id)
        await conn.executemany(
            "INSERT INTO current_sessions (channel, chat_id, user_id, session_id)"
            " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(*chat, sid) for chat, (_, sid) in latest.items()],
        )
    return imported, messages, skipped


async def _exists(conn: AsyncConnection, sql: str, value: str) -> bool:
    async with conn.execute(sql, (value,)) as cur:
        return await cur.fetchone() is not None


async def _insert_session(
    conn: AsyncConnection,
    session: LegacySession,
    estimate: Callable[[str], int],
    redact: Callable[[str], str],
) -> tuple[int, float]:
    """Insert one session and its messages (seq_order 1..n); return (count, last_active)."""
    rows = []
    when = session.created_at
    for seq, msg in enumerate(session.ordered_messages(), start=1):
        # A message without a time inherits its predecessor's, keeping history ordered.
        when = msg.created_at if msg.created_at is not None else when
        content = redact(msg.content)
        rows.append((session.id, seq, msg.role, content, estimate(content), when))
    stated = session.created_at if session.last_active is None else session.last_active
    last_active = max([stated, *(row[5] for row in rows)])
    await conn.execute(
        "INSERT INTO sessions (id, parent_session_id, channel, chat_id, user_id, created_at,"
        " last_active) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            session.id,
            session.parent_session_id,
            session.channel,
            session.chat_id,
            session.user_id,
            session.created_at,
            last_active,
        ),
    )
    await conn.executemany(
        "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
        " created_at) VALUES (?1, ?2, ?3, picobot_seal(?7, ?4), ?5, ?6)",
        [(*row, session.user_id) for row in rows],
    )
    return len(rows), last_active


def _rename(path: Path) -> Path | None:
    """Move the imported file aside without overwriting an earlier ``.migrated`` copy."""
    target = path.with_name(path.name + MIGRATED_SUFFIX)
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}{MIGRATED_SUFFIX}.{n}")
        n += 1
    try:
        path.rename(target)
    except OSError as exc:
        # The data is committed; a re-run would skip every session, so this is harmless.
        log.warning("imported %s but could not rename it: %s", path, exc.strerror)
        return None
    return target

"""Storage caps: at most ``max_sessions_per_user`` sessions per user and
``max_messages_per_session`` messages per session (``[session.retention]``; both off by
default).

The kernel runs :meth:`StorageCaps.enforce` after each turn, once its reply is out (and
after a command that switched the chat's session), inside the session's lock, so the
session's next prompt is built after it. Under the caps that costs one read of one or
two index counts. Past a cap the oldest go as purges and retention delete them, through
their code: whole sessions through the session purge's deletion (messages, summaries,
tool records, recall index entries, vectors, webhook rows, facts and reflections learned
only there, events), the oldest exchanges of the session through the message purge's
(the same, for those messages). Every affected session's cached prompt is dropped
(:attr:`StorageCaps.on_trimmed`), so no removed message is in a later prompt, and the
store's purge generation moves, so other processes sharing the store drop what they
keep of them too (:mod:`picobot.tasks.purge_watch`).

The rows are gone from every query at once; their leftover bytes wait for retention's
next erasure, noted in ``task_runs`` before anything is deleted
(:func:`~picobot.store.task_runs.note_residue`), as a retention sweep's do: erasing after
a turn would stall every writer for seconds per GB. Each cap that acted records one
``retention.capped`` event (ids and counts), and the user gets one notice saying what
went and why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from picobot.access.context import ToolContext
from picobot.config.settings import RetentionSettings
from picobot.messages import Outbound, notice
from picobot.store import purge_generation
from picobot.store.conversation.event_prune import finish_message_cap, finish_session_cap
from picobot.store.db import Database
from picobot.store.erasure.caps import CapLimits, StaleSession, excess
from picobot.store.erasure.message_purge import MessagePurge
from picobot.store.erasure.purge import DEFAULT_BATCH_SIZE, PurgeCounts, PurgeStore
from picobot.store.task_runs import note_residue

log = logging.getLogger(__name__)

TRIM_SHARE = 10
"""A session past the message cap loses a tenth of the cap more than it must, so a long
chat is trimmed (and told) once every few turns rather than at every turn."""
NAMED_SESSIONS = 5
"""Most deleted sessions a notice names; it counts the rest."""


def cap_limits(settings: RetentionSettings) -> CapLimits:
    """The caps ``settings`` set (see :data:`TRIM_SHARE`)."""
    messages = settings.max_messages_per_session
    return CapLimits(settings.max_sessions_per_user, messages, messages - messages // TRIM_SHARE)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def sessions_notice(gone: Sequence[StaleSession], cap: int) -> str:
    """What the user is told when the session cap deleted ``gone``."""
    why = f"this server keeps at most {_plural(cap, 'session')} per user."
    if len(gone) == 1:
        (one,) = gone
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(one.last_active))
        return f"Your oldest session ({one.id}, last active {when}) was deleted: {why}"
    named = ", ".join(s.id for s in gone[:NAMED_SESSIONS])
    if len(gone) > NAMED_SESSIONS:
        named += f" and {len(gone) - NAMED_SESSIONS} more"
    return f"Your {len(gone)} oldest sessions ({named}) were deleted: {why}"


def messages_notice(removed: int, cap: int) -> str:
    """What the user is told when the message cap deleted ``removed`` messages."""
    what = "The oldest message" if removed == 1 else f"The {removed} oldest messages"
    verb = "was" if removed == 1 else "were"
    return (
        f"{what} of this session {verb} deleted: this server keeps at most {cap} messages"
        " per session."
    )


class StorageCaps:
    """Applies the storage caps after a turn; see the module docstring."""

    def __init__(
        self,
        db: Database,
        limits: CapLimits,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self.limits = limits
        self._purge = PurgeStore(db)
        self._messages = MessagePurge(db)
        self._batch = batch_size
        self._clock = clock
        self.on_trimmed: list[Callable[[str], None]] = []
        """Called with each session a cap deleted or took messages from: what caches its
        prompt forgets it (see :meth:`MemoryRetriever.forget`)."""

    @property
    def enabled(self) -> bool:
        """Whether any cap is on."""
        return bool(self.limits.sessions or self.limits.messages)

    async def enforce(self, ctx: ToolContext) -> list[Outbound]:
        """Apply the caps to ``ctx.user_id``, who is in ``ctx.session_id``: delete what is
        past them and return the notice saying what went (none if nothing did)."""
        sid = ctx.session_id
        if sid is None or not self.enabled:
            return []
        found = await self._db.read(lambda conn: excess(conn, ctx.user_id, sid, self.limits))
        if not found:
            return []
        started = time.monotonic()
        await note_residue(self._db, self._clock())
        said: list[str] = []
        done = PurgeCounts()
        if found.sessions:
            counts, gone = await self._drop(found.sessions)
            if gone:
                record = self._record(ctx.user_id, sid, "sessions", counts)
                await finish_session_cap(self._db, [s.id for s in gone], record, self._batch)
                said.append(sessions_notice(gone, self.limits.sessions))
                done += counts
        if found.messages and found.first_kept is not None:
            counts = await self._messages.delete(sid, found.messages)
            self._forget(sid)
            if counts.messages:
                record = self._record(ctx.user_id, sid, "messages", counts)
                await finish_message_cap(self._db, sid, found.first_kept, record, self._batch)
                said.append(messages_notice(counts.messages, self.limits.messages))
                done += counts
        if done.total:  # every process drops what it keeps of it (purge_watch)
            await purge_generation.advance(self._db)
        # Counts and time only: never content, nor whose.
        log.info("storage caps: deleted %s in %.3fs", done.describe(), time.monotonic() - started)
        return [notice(" ".join(said), sid)] if said else []

    async def _drop(
        self, sessions: Sequence[StaleSession]
    ) -> tuple[PurgeCounts, list[StaleSession]]:
        """Delete ``sessions`` whole; what went, and which (another turn's cap may have
        taken one first)."""
        counts, gone = PurgeCounts(), []
        for stale in sessions:
            deleted = await self._purge.delete_session(stale.id, batch_size=self._batch)
            self._forget(stale.id)
            if deleted.sessions:
                counts += deleted
                gone.append(stale)
        return counts, gone

    def _forget(self, session_id: str) -> None:
        for forget in self.on_trimmed:
            forget(session_id)

    def _record(
        self, user_id: str, session_id: str, cap: str, counts: PurgeCounts
    ) -> dict[str, Any]:
        """The ``retention.capped`` event of one cap: against the user and the session
        they are in (not the deleted ones), with the cap, its limit and the counts."""
        limit = self.limits.sessions if cap == "sessions" else self.limits.messages
        return {
            "type_": "retention.capped",
            "now": self._clock(),
            "user_id": user_id,
            "session_id": session_id,
            "actor": "supervisor",
            "payload": {"cap": cap, "limit": limit, "counts": asdict(counts)},
        }

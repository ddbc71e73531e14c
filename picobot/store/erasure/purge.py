"""Counting and deleting conversation data by scope: one session, one user, or by age.

Each scope has a ``count_*`` that runs on the reader and reports exactly what the
matching ``delete_*`` would remove (the confirmation prompt and a retention dry run
show these numbers), and a ``delete_*`` that removes it in batches of ``batch_size``
rows, one write transaction per batch with a yield to the event loop in between, so
a large sweep never holds the writer lock for long and chat turns keep flowing.

Search index entries go with their source rows (the m002 triggers delete them in the
same transaction, queued rowids too; on PostgreSQL an entry's ``search_terms`` rows go
with it by cascade), and dependent rows are deleted explicitly before their session
rather than left to ``ON DELETE CASCADE``, so every removed row is counted. Deleting
rows only unlinks most of their bytes in a SQLite file; call
:func:`picobot.store.erasure.erase.erase_residue` afterwards to make the text
unrecoverable from the database file, its WAL and the FTS5 index.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from picobot.store.channels.webhooks import WebhookStore
from picobot.store.connection import AsyncConnection
from picobot.store.conversation.event_prune import prune_events_before, prune_user_events
from picobot.store.conversation.preferences import delete_preferences
from picobot.store.db import Database
from picobot.store.erasure.export_files import delete_files_before, delete_user_files
from picobot.store.erasure.pending_purges import delete_user_pending
from picobot.store.erasure.purge_counts import PurgeCounts as PurgeCounts  # re-exported
from picobot.store.erasure.purge_counts import index_entries
from picobot.store.learned.digest_purge import DigestPurge, delete_session_layers
from picobot.store.learned.fact_purge import FactPurge, delete_session_facts

DEFAULT_BATCH_SIZE = 500
KEYED_USER_BATCH = 50
"""Rows per transaction of a user purge once their key is gone: nothing of theirs is
readable any more, so the deletion may take longer in exchange for shorter holds of the
writer (other users' turn p99 during a 100,000-message purge: 1.7-1.9x at 50 rows,
2.7-2.9x at 100; docs/privacy.md#per-user-keys)."""
"""Rows per delete transaction when the caller does not say (config: retention_batch_size)."""

Clause = tuple[str, tuple[Any, ...]]
"""A WHERE expression and its parameters."""
Deleter = Callable[[AsyncConnection, str], Awaitable[PurgeCounts]]
"""Deletes a batch of rows by key (a JSON array) in a transaction; what it deleted."""

_NOTHING: Clause = ("1 = 0", ())


@dataclass(frozen=True, slots=True)
class _Scope:
    """What a purge selects, table by table (a WHERE clause for each)."""

    messages: Clause
    tool_records: Clause
    memories: Clause
    summaries: Clause
    sessions: Clause
    """Sessions deleted whole; every message they still hold is in ``messages`` too."""
    current: Clause = _NOTHING
    """Extra ``current_sessions`` rows (those of deleted sessions always go)."""


def _session_scope(session_id: str) -> _Scope:
    one: Clause = ("session_id = ?", (session_id,))
    return _Scope(
        messages=one,
        tool_records=one,
        memories=_NOTHING,
        summaries=one,
        sessions=("id = ?", (session_id,)),
    )


def _user_scope(user_id: str) -> _Scope:
    owned: Clause = ("session_id IN (SELECT id FROM sessions WHERE user_id = ?)", (user_id,))
    return _Scope(
        messages=owned,
        # A tool record names its user too; one left in a session that changed hands
        # is still this user's data.
        tool_records=(f"user_id = ? OR {owned[0]}", (user_id, user_id)),
        memories=("user_id = ?", (user_id,)),
        summaries=owned,
        sessions=("user_id = ?", (user_id,)),
        current=("user_id = ?", (user_id,)),
    )


def _older_scope(cutoff: float) -> _Scope:
    # The same predicates serve count and delete. Evaluated after the old messages
    # are gone, "no message at or after the cutoff" equals "no message left", which is
    # what makes a summary or session expire; evaluated before, it predicts it.
    # A pinned message (m015) stays, and so does the session it belongs to.
    return _Scope(
        messages=(
            "created_at < ? AND NOT EXISTS (SELECT 1 FROM message_pins p"
            " WHERE p.message_id = messages.id)",
            (cutoff,),
        ),
        tool_records=("created_at < ?", (cutoff,)),
        memories=_NOTHING,  # explicit user memories live until deleted
        summaries=(
            "NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id ="
            " session_summaries.session_id AND m.seq_order <= session_summaries.covered_seq"
            " AND m.created_at >= ?)",
            (cutoff,),
        ),
        sessions=(
            "last_active < ? AND NOT EXISTS (SELECT 1 FROM messages m"
            " WHERE m.session_id = sessions.id AND m.created_at >= ?) AND NOT EXISTS"
            " (SELECT 1 FROM message_pins p WHERE p.session_id = sessions.id)",
            (cutoff, cutoff),
        ),
    )


class PurgeStore:
    """Count and delete a session's, a user's, or all expired conversation data."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def count_session(self, session_id: str) -> PurgeCounts:
        """What :meth:`delete_session` would remove now."""
        counts = await self._count(_session_scope(session_id))
        queued = await WebhookStore(self._db).count_session(session_id)
        facts = await FactPurge(self._db).count_session(session_id)
        return _derived(
            counts, queued, facts, await DigestPurge(self._db).count_session(session_id)
        )

    async def delete_session(
        self, session_id: str, *, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> PurgeCounts:
        """Delete one session with its messages, summary, tool records, index entries, the
        webhook rows of its messages (found through the messages, so first), and the
        facts and reflections learned from it (digests above those lose their text).

        The derived rows go in the transaction that deletes the session row: a fact or
        reflection written meanwhile checks its session in its own write, and a purge
        cut short before leaves the session, so it can be purged again."""
        queued = await WebhookStore(self._db).delete_session(session_id)
        counts = await self._delete(_session_scope(session_id), batch_size, _del_learned)
        if not counts.sessions:  # gone already: take what an earlier purge left
            async with self._db.transaction() as conn:
                counts += await _del_learned(conn, json.dumps([session_id]), sessions=False)
        return counts + PurgeCounts(webhook_rows=queued)

    async def count_user(self, user_id: str) -> PurgeCounts:
        """What :meth:`delete_user` would remove now."""
        counts = await self._count(_user_scope(user_id))
        queued = await WebhookStore(self._db).count_user(user_id)
        facts = await FactPurge(self._db).count_user(user_id)
        return _derived(counts, queued, facts, await DigestPurge(self._db).count_user(user_id))

    async def delete_user(
        self, user_id: str, *, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> PurgeCounts:
        """Delete everything of ``user_id``: sessions (with all they hold), memories,
        tool records, current-session pointers, index entries, webhook queue rows,
        learned facts, reflections, digests, events, privacy switches, pending purges they
        asked for or that concern them, and export files.

        The user's key goes first: from then on nothing sealed with it can be read, in
        these files or in any backup, whatever the row deletion below still has to do.
        """
        self._db.sealer.forget(user_id)
        if self._db.sealer.keyed:
            batch_size = min(batch_size, KEYED_USER_BATCH)
        counts = await self._delete(_user_scope(user_id), batch_size)
        queued = await WebhookStore(self._db).delete_user(user_id)
        facts = await FactPurge(self._db).delete_user(user_id)
        layers = await DigestPurge(self._db).delete_user(user_id)
        await prune_user_events(self._db, user_id, batch_size)
        await self._db.write(lambda conn: delete_preferences(conn, user_id))
        await self._db.write(lambda conn: delete_user_pending(conn, user_id))
        delete_user_files(self._db.path.parent, user_id)  # their /export files
        return _derived(counts, queued, facts, layers)

    async def count_older(self, cutoff_ts: float) -> PurgeCounts:
        """What :meth:`delete_older` would remove for the same cutoff."""
        counts = await self._count(_older_scope(cutoff_ts))
        queued = await WebhookStore(self._db).count_before(cutoff_ts)
        return counts + PurgeCounts(webhook_rows=queued)

    async def delete_older(
        self, cutoff_ts: float, *, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> PurgeCounts:
        """Delete conversation data created before ``cutoff_ts`` (epoch seconds).

        Removes messages and tool records older than the cutoff, summaries whose
        covered messages are all gone, and sessions left empty whose last activity is
        older than the cutoff, and finished webhook queue rows older than the cutoff.
        Events older than the cutoff go too (those of deleted sessions went with them).
        User memories are never touched.
        """
        counts = await self._delete(_older_scope(cutoff_ts), batch_size)
        queued = await WebhookStore(self._db).delete_before(cutoff_ts)
        await prune_events_before(self._db, cutoff_ts, batch_size)
        delete_files_before(self._db.path.parent, cutoff_ts)  # /export files
        return counts + PurgeCounts(webhook_rows=queued)

    # --- counting -------------------------------------------------------------------

    async def _count(self, scope: _Scope) -> PurgeCounts:
        doomed = f"SELECT id FROM sessions WHERE {scope.sessions[0]}"  # noqa: S608
        msg_sql, msg_params = scope.messages
        mem_sql, mem_params = scope.memories
        tool_sql, tool_params = scope.tool_records
        sum_sql, sum_params = scope.summaries
        msg_ids = f"SELECT id FROM messages WHERE {msg_sql}"  # noqa: S608
        mem_rowids = f"SELECT -id FROM user_memories WHERE {mem_sql}"  # noqa: S608 - see m002
        # Dependent rows of a deleted session go too, even when they are not selected
        # by their own clause (a tool record newer than the retention cutoff).
        # The clauses are constants of this module; only their parameters come from callers.
        row = await self._db.fetchone(
            "SELECT"  # noqa: S608
            f" (SELECT COUNT(*) FROM sessions WHERE {scope.sessions[0]}),"
            f" (SELECT COUNT(*) FROM messages WHERE {msg_sql}),"
            f" (SELECT COUNT(*) FROM session_summaries WHERE ({sum_sql})"
            f"   OR session_id IN ({doomed})),"
            f" (SELECT COUNT(*) FROM user_memories WHERE {mem_sql}),"
            f" {index_entries(msg_ids)} +"
            f" (SELECT COUNT(*) FROM message_vectors WHERE message_id IN ({msg_ids})) +"
            f" {index_entries(mem_rowids)},"
            f" (SELECT COUNT(*) FROM tool_records WHERE ({tool_sql})"
            f"   OR session_id IN ({doomed}))",
            (
                *scope.sessions[1],
                *msg_params,
                *sum_params,
                *scope.sessions[1],
                *mem_params,
                *msg_params,
                *msg_params,
                *msg_params,
                *mem_params,
                *mem_params,
                *tool_params,
                *scope.sessions[1],
            ),
        )
        assert row is not None  # a SELECT without FROM always yields one row
        return PurgeCounts(*(int(v) for v in row))

    # --- deleting -------------------------------------------------------------------

    async def _delete(
        self, scope: _Scope, batch_size: int, drop: Deleter | None = None
    ) -> PurgeCounts:
        """Sweep ``scope``; the sessions go through ``drop`` (default: ``_del_sessions``)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        done = PurgeCounts()
        done += await self._sweep("messages", "id", scope.messages, batch_size, _del_messages)
        done += await self._sweep("tool_records", "id", scope.tool_records, batch_size, _del_tools)
        done += await self._sweep("user_memories", "id", scope.memories, batch_size, _del_memories)
        done += await self._sweep(
            "session_summaries", "session_id", scope.summaries, batch_size, _del_summaries
        )
        if scope.current is not _NOTHING:
            async with self._db.transaction() as conn:
                sql, params = scope.current
                await conn.execute(f"DELETE FROM current_sessions WHERE {sql}", params)  # noqa: S608
        drop = drop or _del_sessions
        done += await self._sweep("sessions", "id", scope.sessions, batch_size, drop)
        # A turn's memory save checks its session in its own write (MemoryRepo.save): one
        # that got in after the sweep above but before its session went is taken here.
        done += await self._sweep("user_memories", "id", scope.memories, batch_size, _del_memories)
        return done

    async def _sweep(
        self,
        table: str,
        key: str,
        where: Clause,
        batch_size: int,
        delete: Deleter,
    ) -> PurgeCounts:
        """Delete ``table`` rows matching ``where``, ``batch_size`` per transaction."""
        sql, params = where
        done = PurgeCounts()
        if where is _NOTHING:
            return done
        while True:
            async with self._db.transaction() as conn:
                # Deleted rows no longer match, so each batch starts from the top; the
                # keys are selected and deleted in one transaction, so nothing slips in.
                keys = await _column(
                    conn,
                    f"SELECT {key} FROM {table} WHERE {sql} LIMIT ?",  # noqa: S608
                    (*params, batch_size),
                )
                if keys:
                    done += await delete(conn, json.dumps(keys))
            if not keys:
                return done
            # Writers queued on the (fair) lock get in between batches anyway; this
            # also lets tasks that need no lock run before the next batch starts.
            await asyncio.sleep(0)


# Batch deleters: ``keys`` is a JSON array of row keys (json_each takes any number).
_KEYS = "SELECT value FROM json_each(?1)"
_IN_KEYS = "IN (SELECT value FROM json_each(?))"


def _derived(
    counts: PurgeCounts, queued: int, facts: tuple[int, int], layers: tuple[int, int]
) -> PurgeCounts:
    """``counts`` plus webhook rows, (facts, their index entries) and (reflections and
    digests, their index entries)."""
    return counts + PurgeCounts(
        webhook_rows=queued,
        facts=facts[0],
        digests=layers[0],
        index_entries=facts[1] + layers[1],
    )


async def _del_messages(conn: AsyncConnection, keys: str) -> PurgeCounts:
    # Counted before the delete: the triggers remove exactly these (indexed or queued),
    # and the foreign key the messages' vectors.
    entries = await _scalar(
        conn,
        f"SELECT {index_entries(_KEYS)} + (SELECT COUNT(*) FROM message_vectors"  # noqa: S608
        f" WHERE message_id IN ({_KEYS}))",
        keys,
    )
    n = await _delete_in(conn, "messages", "id", keys)
    return PurgeCounts(messages=n, index_entries=entries)


async def _del_memories(conn: AsyncConnection, keys: str) -> PurgeCounts:
    # A memory's entry has rowid -id (see m002).
    rowids = json.dumps([-int(key) for key in json.loads(keys)])
    entries = await _scalar(conn, f"SELECT {index_entries(_KEYS)}", rowids)
    return PurgeCounts(
        memories=await _delete_in(conn, "user_memories", "id", keys), index_entries=entries
    )


async def _del_tools(conn: AsyncConnection, keys: str) -> PurgeCounts:
    return PurgeCounts(tool_records=await _delete_in(conn, "tool_records", "id", keys))


async def _del_summaries(conn: AsyncConnection, keys: str) -> PurgeCounts:
    return PurgeCounts(summaries=await _delete_in(conn, "session_summaries", "session_id", keys))


async def _del_sessions(conn: AsyncConnection, keys: str) -> PurgeCounts:
    # Whatever the sessions still hold (rows written after the earlier sweeps, or
    # tool records newer than a retention cutoff) is deleted and counted here rather
    # than vanishing uncounted through ON DELETE CASCADE.
    held = await _column(
        conn,
        "SELECT id FROM messages WHERE session_id IN (SELECT value FROM json_each(?))",
        (keys,),
    )
    done = await _del_messages(conn, json.dumps(held)) if held else PurgeCounts()
    tools = await _delete_in(conn, "tool_records", "session_id", keys)
    sums = await _delete_in(conn, "session_summaries", "session_id", keys)
    await _delete_in(conn, "current_sessions", "session_id", keys)
    await _delete_in(conn, "events", "session_id", keys)  # what happened in them goes too
    n = await _delete_in(conn, "sessions", "id", keys)
    return done + PurgeCounts(sessions=n, summaries=sums, tool_records=tools)


async def _del_learned(conn: AsyncConnection, keys: str, *, sessions: bool = True) -> PurgeCounts:
    """The facts learned only in the sessions ``keys`` and their reflections, then (with
    ``sessions``) the sessions themselves, all in ``conn``'s transaction."""
    done = PurgeCounts()
    for session_id in json.loads(keys):
        facts = await delete_session_facts(conn, session_id)
        layers = await delete_session_layers(conn, session_id)
        done = _derived(done, 0, facts, layers)
    if sessions:
        done += await _del_sessions(conn, keys)
    return done


async def _delete_in(conn: AsyncConnection, table: str, column: str, keys: str) -> int:
    # table and column are constants of this module, never caller input.
    sql = f"DELETE FROM {table} WHERE {column} {_IN_KEYS}"  # noqa: S608
    async with conn.execute(sql, (keys,)) as cur:
        return int(cur.rowcount)


async def _column(conn: AsyncConnection, sql: str, params: tuple[Any, ...]) -> list[Any]:
    async with conn.execute(sql, params) as cur:
        return [row[0] for row in await cur.fetchall()]


async def _scalar(conn: AsyncConnection, sql: str, keys: str) -> int:
    async with conn.execute(sql, (keys,)) as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0

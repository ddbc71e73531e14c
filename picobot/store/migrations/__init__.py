"""Numbered schema migrations, applied in order and recorded in the database.

Each migration is a named function; ``MIGRATIONS`` is the ordered list and a
migration's version is its position (1-based). Applied versions live in the
``_migrations`` table. Never edit a released migration: append a new one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picobot.errors import StoreUnavailable, UserError
from picobot.store.connection import AsyncConnection
from picobot.store.migrations.channels import m016_channel_offsets
from picobot.store.migrations.events import m014_events, m017_events_autoincrement
from picobot.store.migrations.facts import m012_learned_facts, m029_fact_revisions
from picobot.store.migrations.forks import m022_fork_points
from picobot.store.migrations.instances import (
    m026_leases,
    m027_queue_claims,
    m028_pending_purges,
)
from picobot.store.migrations.keys import m020_store_meta
from picobot.store.migrations.layers import m015_memory_layers
from picobot.store.migrations.preferences import m019_user_preferences
from picobot.store.migrations.revisions import revision_triggers, revisions_table
from picobot.store.migrations.script import run_script
from picobot.store.migrations.sealing import (
    m023_sealed_index_triggers,
    m024_vectors_survive_sealing,
    m025_sealed_names,
)
from picobot.store.migrations.search import (
    m002_search_index,
    m005_user_terms,
    m006_deferred_message_index,
    m009_search_tidy_steps,
    m011_split_unspaced_scripts,
)
from picobot.store.migrations.vectors import m018_message_vectors
from picobot.store.migrations.webhooks import (
    m004_webhook_queues,
    m013_webhook_replay_guard,
    m021_outbound_documents,
)

if TYPE_CHECKING:
    from picobot.store.db import Database

log = logging.getLogger(__name__)

Migration = Callable[[AsyncConnection], Awaitable[None]]


async def m001_core_tables(conn: AsyncConnection) -> None:
    """Sessions, messages, user memories, session summaries, tool records."""
    await run_script(
        conn,
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            parent_session_id TEXT REFERENCES sessions(id) ON DELETE SET NULL,
            channel TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            last_active REAL NOT NULL,
            state_json TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX sessions_by_user ON sessions(user_id, last_active DESC);

        -- The session each (channel, chat, user) is currently talking in.
        CREATE TABLE current_sessions (
            channel TEXT NOT NULL,
            chat_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            PRIMARY KEY (channel, chat_id, user_id)
        );

        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            seq_order INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
            content TEXT NOT NULL,
            token_estimate INTEGER NOT NULL,
            created_at REAL NOT NULL,
            UNIQUE (session_id, seq_order)
        );
        CREATE INDEX messages_by_age ON messages(created_at);

        CREATE TABLE user_memories (
            id INTEGER PRIMARY KEY,
            user_id TEXT NOT NULL,
            key TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (user_id, key)
        );

        CREATE TABLE session_summaries (
            session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            summary TEXT NOT NULL,
            covered_seq INTEGER NOT NULL,
            token_estimate INTEGER NOT NULL,
            updated_at REAL NOT NULL
        );

        CREATE TABLE tool_records (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            user_id TEXT NOT NULL,
            name TEXT NOT NULL,
            arguments TEXT NOT NULL,
            result TEXT NOT NULL,
            ok INTEGER NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX tool_records_by_session ON tool_records(session_id);
        CREATE INDEX tool_records_by_age ON tool_records(created_at);
        """,
    )


async def m003_task_runs(conn: AsyncConnection) -> None:
    """The last run of each background job, kept durably by job name.

    The supervisor's JobStatus lives in memory; this row survives a restart, so a job
    that failed (or died mid-run: ``last_started_at`` after ``last_finished_at``) stays
    visible to ``picobot status``. ``result`` and ``error`` hold counts and error
    types, never user content. See picobot.tasks.retention.
    """
    await run_script(
        conn,
        """
        CREATE TABLE task_runs (
            name TEXT PRIMARY KEY,
            last_started_at REAL,
            last_finished_at REAL,
            ok INTEGER,
            result TEXT,
            error TEXT
        );
        """,
    )


async def m007_message_sources(conn: AsyncConnection) -> None:
    """Where a message came from, for channels that may hand it over twice.

    ``source_id`` is ``<channel>:<platform message id>`` for a webhook message, NULL
    for the others, and unique in its session. A webhook turn that a crash cut short
    runs again on restart; it finds its message (and a reply already stored) instead
    of storing them a second time. See
    :meth:`picobot.store.conversation.messages.MessageRepo.append`.
    """
    await run_script(
        conn,
        """
        ALTER TABLE messages ADD COLUMN source_id TEXT;
        CREATE UNIQUE INDEX messages_by_source ON messages(session_id, source_id)
            WHERE source_id IS NOT NULL;
        """,
    )


async def m008_memory_revisions(conn: AsyncConnection) -> None:
    """A revision per user's memories, so a reader can tell whether they changed.

    Every insert, update or delete of a user's memories gives that user's row in
    ``memory_revisions`` a fresh value from ``revision_clock`` (a counter that only
    grows), in the transaction of the change, whichever process or client makes it.
    A user without memories has no row: their last delete removes it, so a purged
    user's id does not stay behind. Values are never reused, so an unchanged
    revision means unchanged memories. See picobot.store.conversation.memory_cache.
    """
    clock = """
        CREATE TABLE revision_clock (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            value INTEGER NOT NULL
        );
        INSERT INTO revision_clock (id, value) VALUES (1, 1);
        """
    table = revisions_table("memory_revisions", "user_memories")
    triggers = revision_triggers("user_memories", "user_memories", "memory_revisions")
    await run_script(conn, clock + table + triggers)


MIGRATIONS: list[Migration] = [
    m001_core_tables,
    m002_search_index,
    m003_task_runs,
    m004_webhook_queues,
    m005_user_terms,
    m006_deferred_message_index,
    m007_message_sources,
    m008_memory_revisions,
    m009_search_tidy_steps,
    m011_split_unspaced_scripts,
    m012_learned_facts,
    m013_webhook_replay_guard,
    m014_events,
    m015_memory_layers,
    m016_channel_offsets,
    m017_events_autoincrement,
    m018_message_vectors,
    m019_user_preferences,
    m020_store_meta,
    m021_outbound_documents,
    m022_fork_points,
    m023_sealed_index_triggers,
    m024_vectors_survive_sealing,
    m025_sealed_names,
    m026_leases,
    m027_queue_claims,
    m028_pending_purges,
    m029_fact_revisions,
]


async def _ensure_table(db: Database) -> None:
    async with db.transaction() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS _migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )


async def applied_versions(db: Database) -> list[tuple[int, str]]:
    """The (version, name) of every applied migration, in order."""
    await _ensure_table(db)
    rows = await db.fetchall("SELECT version, name FROM _migrations ORDER BY version")
    return [(int(r["version"]), str(r["name"])) for r in rows]


async def apply_migrations(db: Database, migrations: list[Migration] | None = None) -> list[str]:
    """Apply every pending migration, each in its own transaction; return their names.

    On PostgreSQL the schema is created whole (:mod:`picobot.store.postgres.schema`)
    when the database has none yet, and must otherwise be current.
    """
    if db.engine.name == "postgresql":
        return await _postgres_schema(db)
    todo = MIGRATIONS if migrations is None else migrations
    done = {version for version, _ in await applied_versions(db)}
    if done and max(done) > len(todo):
        raise _newer(db.path, max(done), len(todo))
    applied = []
    for version, migration in enumerate(todo, start=1):
        if version in done:
            continue
        name = migration.__name__
        if done:  # an existing database: say what is running, it may take a while
            log.info("applying migration %d %s to %s", version, name, db.path)
        async with db.transaction() as conn:
            await migration(conn)
            await conn.execute(
                "INSERT INTO _migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (version, name, time.time()),
            )
        log.info("applied migration %d %s", version, name)
        applied.append(name)
    return applied


async def _postgres_schema(db: Database) -> list[str]:
    """Create the PostgreSQL schema unless it exists; the migrations it stands for.

    Under the writer lock (a write transaction), so two instances starting together
    create it once.
    """
    from picobot.store.postgres.schema import (
        MIGRATION_NAMES,
        create_schema,
        existing_tables,
        upgrade_schema,
    )

    def create(conn: Any) -> list[str]:
        if existing_tables(conn.raw):
            return []
        create_schema(conn.raw)
        return list(MIGRATION_NAMES)

    def upgrade(conn: Any) -> list[str]:
        # Read again under the writer lock: another instance may have upgraded it.
        row = conn.execute("SELECT MAX(version) FROM _migrations").fetchone()
        current = int(row[0] or 0)
        if current >= len(MIGRATIONS):
            return []
        applied = upgrade_schema(conn.raw, current)
        for name in applied:
            log.info("applied migration %s to %s", name, db.engine.where)
        return applied

    created = await db.write(create)
    state = await schema_state(db)
    if state.ahead:
        raise _newer(db.engine.where, state.current, state.known)
    if state.behind:
        created += await db.write(upgrade)
    return created


def _newer(path: Path | str, version: int, known: int) -> StoreUnavailable:
    return StoreUnavailable(
        f"database {path} has schema version {version}, newer than this "
        f"PicoBot knows ({known}); upgrade PicoBot"
    )


@dataclass(frozen=True, slots=True)
class SchemaState:
    """A database's schema version against the migrations this PicoBot knows."""

    current: int
    known: int

    @property
    def behind(self) -> bool:
        """Migrations are pending (``picobot migrate`` or any writing command applies them)."""
        return self.current < self.known

    @property
    def ahead(self) -> bool:
        """A newer PicoBot has upgraded the file; this one must not use it."""
        return self.current > self.known


async def schema_state(db: Database) -> SchemaState:
    """The schema version against the known migrations, read without writing anything.

    Unlike :func:`applied_versions` this never creates the ``_migrations`` table: a
    file without one is at version 0.
    """
    table = await db.fetchone(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'"
    )
    row = await db.fetchone("SELECT MAX(version) FROM _migrations") if table else None
    return SchemaState(int(row[0] or 0) if row is not None else 0, len(MIGRATIONS))


async def require_current_schema(db: Database) -> None:
    """Raise unless the schema is exactly the one this PicoBot knows; change nothing.

    For commands that only read: they must not upgrade the file as a side effect (a
    migration may be long, and an older PicoBot sharing the file could no longer open
    it), and an older schema may lack what they query.
    """
    state = await schema_state(db)
    if state.ahead:
        raise _newer(db.path, state.current, state.known)
    if state.behind:
        raise UserError(
            f"database {db.path} has schema version {state.current} of {state.known};"
            " run `picobot migrate` to upgrade it (this command only reads, so it does not)"
        )

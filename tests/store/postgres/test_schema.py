"""The PostgreSQL schema against the SQLite one after every migration: same tables,
columns, keys, indexes and triggers, and triggers that keep the recall queue, the
memory and fact revisions and the cascades as SQLite's do; the upgrade in place."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from picobot.config.keys import KeySettings
from picobot.errors import StoreUnavailable
from picobot.store.db import Database
from picobot.store.keys import open_keyring
from picobot.store.keys.backfill import SEALED_COLUMNS
from picobot.store.migrations import MIGRATIONS
from picobot.store.migrations.facts import FACT_ROWID_BASE
from picobot.store.migrations.layers import DIGEST_ROWID_BASE, REFLECTION_ROWID_BASE
from picobot.store.postgres.schema import (
    EXTRA_COLUMNS,
    EXTRA_TABLES,
    MIGRATION_NAMES,
    SCHEMA_VERSION,
    SchemaExists,
    create_schema,
    table_names,
    upgrade_schema,
)

FTS5_SHADOWS = {f"search_index_{s}" for s in ("data", "idx", "content", "docsize", "config")}


@pytest.fixture
def pg_empty(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to a new, empty database of its own."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def pg(pg_empty: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """An autocommit connection to a database holding the schema."""
    create_schema(pg_empty)
    return pg_empty


@dataclass(frozen=True)
class SqliteSchema:
    """What a freshly migrated SQLite database holds, read once per module."""

    tables: dict[str, list[tuple[Any, ...]]]
    """Each table's PRAGMA table_info rows (FTS5 shadow tables and sqlite_sequence out)."""
    indexes: dict[str, tuple[str, bool, tuple[str, ...], bool]]
    """Each named index: (table, unique, columns, partial)."""
    unique_keys: dict[str, set[tuple[tuple[str, ...], bool]]]
    """Each table's unique column lists (primary key included), with whether partial."""
    foreign_keys: dict[str, set[tuple[tuple[str, ...], str, tuple[str, ...], str]]]
    """Each table's foreign keys: (columns, referenced table, its columns, ON DELETE)."""
    triggers: dict[str, str]
    """Each trigger's table."""
    row_counts: dict[str, int]
    migrations: list[tuple[int, str]]


def _read_sqlite(path: Path) -> SqliteSchema:
    async def create() -> None:
        db = await Database.open(path)
        await db.close()

    asyncio.run(create())
    conn = sqlite3.connect(path)
    try:
        names = [
            str(r[0])
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if r[0] not in FTS5_SHADOWS and r[0] != "sqlite_sequence"
        ]
        tables = {t: conn.execute(f"PRAGMA table_info({t})").fetchall() for t in names}
        indexes: dict[str, tuple[str, bool, tuple[str, ...], bool]] = {}
        unique_keys: dict[str, set[tuple[tuple[str, ...], bool]]] = {}
        foreign_keys: dict[str, set[tuple[tuple[str, ...], str, tuple[str, ...], str]]] = {}
        for table in names:
            pk = tuple(r[1] for r in sorted(tables[table], key=lambda r: r[5]) if r[5])
            unique_keys[table] = {(pk, False)} if pk else set()
            for _, index, unique, _origin, partial in conn.execute(f"PRAGMA index_list({table})"):
                cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({index})"))
                if not index.startswith("sqlite_autoindex_"):
                    indexes[index] = (table, bool(unique), cols, bool(partial))
                if unique:
                    unique_keys[table].add((cols, bool(partial)))
            fks: dict[int, list[Any]] = {}
            for fk_id, _seq, ref, src, dst, _upd, on_delete, _match in conn.execute(
                f"PRAGMA foreign_key_list({table})"
            ):
                fks.setdefault(fk_id, [ref, [], [], on_delete])
                fks[fk_id][1].append(src)
                fks[fk_id][2].append(dst)
            foreign_keys[table] = {(tuple(f[1]), f[0], tuple(f[2]), f[3]) for f in fks.values()}
        triggers = {
            str(r[0]): str(r[1])
            for r in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'")
        }
        count = "SELECT COUNT(*) FROM {}"
        counts = {t: int(conn.execute(count.format(t)).fetchone()[0]) for t in names}
        migrations = [
            (int(v), str(n)) for v, n in conn.execute("SELECT version, name FROM _migrations")
        ]
    finally:
        conn.close()
    return SqliteSchema(
        tables, indexes, unique_keys, foreign_keys, triggers, counts, sorted(migrations)
    )


@pytest.fixture(scope="module")
def sqlite_schema(tmp_path_factory: pytest.TempPathFactory) -> SqliteSchema:
    return _read_sqlite(tmp_path_factory.mktemp("sqlite") / "conversations.db")


def _count(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(sql.SQL("SELECT COUNT(*) FROM {}").format(sql.Identifier(table))).fetchone()
    assert row is not None
    return int(row[0])


def _pg_columns(conn: psycopg.Connection[Any], table: str) -> list[tuple[str, str, bool, Any]]:
    """(name, type, not null, default) of a table's columns, in order."""
    rows = conn.execute(
        "SELECT column_name, data_type, is_nullable = 'NO', column_default"
        " FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [(str(r[0]), str(r[1]), bool(r[2]), r[3]) for r in rows]


def _pg_index_columns(conn: psycopg.Connection[Any], index_oid: int) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i"
        " CROSS JOIN unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
        " WHERE i.indexrelid = %s ORDER BY k.ord",
        (index_oid,),
    ).fetchall()
    return tuple(str(r[0]) for r in rows)


def _pg_indexes(
    conn: psycopg.Connection[Any],
) -> dict[str, tuple[str, bool, tuple[str, ...], bool]]:
    """Each index of the current schema: (table, unique, columns, partial)."""
    rows = conn.execute(
        "SELECT ic.relname, tc.relname, i.indisunique, i.indpred IS NOT NULL, i.indexrelid"
        " FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid"
        " JOIN pg_class tc ON tc.oid = i.indrelid"
        " WHERE tc.relnamespace = current_schema()::regnamespace"
    ).fetchall()
    return {
        str(name): (str(table), bool(unique), _pg_index_columns(conn, oid), bool(partial))
        for name, table, unique, partial, oid in rows
    }


SQLITE_TYPES = {"INTEGER": "bigint", "REAL": "double precision", "TEXT": "text", "BLOB": "bytea"}
PG_ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL"}


# The FTS5 table's columns are untyped; what they hold is typed here, and every index
# row has an owner and a body.
SEARCH_INDEX_TYPES = {
    "owner": "text",
    "body": "text",
    "session_id": "text",
    "seq_order": "bigint",
    "created_at": "double precision",
}
NOT_NULL_HERE = {("search_index", "owner"), ("search_index", "body")}


def _expected_type(table: str, column: str, declared: str) -> str:
    if table == "search_index":
        return SEARCH_INDEX_TYPES[column]
    if (table, column) in {(c.table, c.column) for c in SEALED_COLUMNS}:
        return "bytea"  # the tag columns, untyped in SQLite, too
    return SQLITE_TYPES[declared]


def _default(value: Any) -> str | None:
    """A column default without PostgreSQL's cast (``'{}'::text`` is ``'{}'``)."""
    return None if value is None else str(value).split("::")[0]


def test_schema_applies_to_an_empty_database(pg_empty: psycopg.Connection[Any]) -> None:
    create_schema(pg_empty)

    rows = pg_empty.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    ).fetchall()
    assert sorted(str(r[0]) for r in rows) == sorted(table_names())
    assert len(table_names()) == len(set(table_names()))


def test_applying_twice_is_refused_and_changes_nothing(pg: psycopg.Connection[Any]) -> None:
    pg.execute("INSERT INTO store_meta (name, value) VALUES ('kept', 'yes')")
    clock = pg.execute("SELECT value FROM revision_clock").fetchall()

    with pytest.raises(SchemaExists, match="already holds store tables"):
        create_schema(pg)

    assert pg.execute("SELECT value FROM store_meta").fetchall() == [("yes",)]
    assert pg.execute("SELECT COUNT(*) FROM _migrations").fetchone() == (SCHEMA_VERSION,)
    assert pg.execute("SELECT value FROM revision_clock").fetchall() == clock


def test_a_partial_schema_is_refused_whole(pg_empty: psycopg.Connection[Any]) -> None:
    pg_empty.execute("CREATE TABLE leases (name TEXT)")

    with pytest.raises(SchemaExists, match="leases"):
        create_schema(pg_empty)

    rows = pg_empty.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    ).fetchall()
    assert rows == [("leases",)]


def test_every_sqlite_table_has_its_columns(
    pg: psycopg.Connection[Any], sqlite_schema: SqliteSchema
) -> None:
    assert set(table_names()) == set(sqlite_schema.tables) | set(EXTRA_TABLES)
    for table, info in sqlite_schema.tables.items():
        columns = _pg_columns(pg, table)
        extra = EXTRA_COLUMNS.get(table, ())
        assert [c[0] for c in columns if c[0] not in extra] == [r[1] for r in info], table
        by_name = {c[0]: c for c in columns}
        for _cid, name, declared, notnull, default, pk in info:
            _, pg_type, pg_notnull, pg_default = by_name[name]
            assert pg_type == _expected_type(table, name, declared), (table, name)
            assert pg_notnull == bool(notnull or pk or (table, name) in NOT_NULL_HERE), name
            assert _default(pg_default) == (None if default is None else str(default)), name


def test_sealed_columns_are_bytes(pg: psycopg.Connection[Any]) -> None:
    for column in SEALED_COLUMNS:
        types = {c[0]: c[1] for c in _pg_columns(pg, column.table)}
        assert types[column.column] == "bytea", column


def test_keys_and_indexes_match_sqlite(
    pg: psycopg.Connection[Any], sqlite_schema: SqliteSchema
) -> None:
    indexes = _pg_indexes(pg)
    for name, spec in sqlite_schema.indexes.items():
        assert indexes.get(name) == spec, name
    for table, keys in sqlite_schema.unique_keys.items():
        extra = set(EXTRA_COLUMNS.get(table, ()))
        pg_keys = {
            (cols, partial)
            for t, unique, cols, partial in indexes.values()
            if t == table and unique and not extra & set(cols)
        }
        assert pg_keys == keys, table


def test_foreign_keys_match_sqlite(
    pg: psycopg.Connection[Any], sqlite_schema: SqliteSchema
) -> None:
    rows = pg.execute(
        "SELECT c.conrelid::regclass::text, r.relname, c.confdeltype, c.condeferrable,"
        " c.condeferred,"
        " ARRAY(SELECT attname FROM unnest(c.conkey) WITH ORDINALITY k(n, o)"
        "  JOIN pg_attribute ON attrelid = c.conrelid AND attnum = k.n ORDER BY o),"
        " ARRAY(SELECT attname FROM unnest(c.confkey) WITH ORDINALITY k(n, o)"
        "  JOIN pg_attribute ON attrelid = c.confrelid AND attnum = k.n ORDER BY o)"
        " FROM pg_constraint c JOIN pg_class r ON r.oid = c.confrelid WHERE c.contype = 'f'"
    ).fetchall()
    found: dict[str, set[tuple[tuple[str, ...], str, tuple[str, ...], str]]] = {}
    for table, ref, on_delete, deferrable, deferred, cols, ref_cols in rows:
        assert deferrable and not deferred, table
        found.setdefault(table, set()).add(
            (tuple(cols), ref, tuple(ref_cols), PG_ON_DELETE[on_delete])
        )
    expected = {t: fks for t, fks in sqlite_schema.foreign_keys.items() if fks}
    expected["search_terms"] = {(("doc",), "search_index", ("rowid",), "CASCADE")}
    assert found == expected


def test_every_sqlite_trigger_exists(
    pg: psycopg.Connection[Any], sqlite_schema: SqliteSchema
) -> None:
    rows = pg.execute(
        "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        " WHERE NOT t.tgisinternal"
    ).fetchall()
    assert dict(rows) == sqlite_schema.triggers


def test_seeded_rows_match_sqlite(pg: psycopg.Connection[Any], sqlite_schema: SqliteSchema) -> None:
    assert list(MIGRATION_NAMES) == [m.__name__ for m in MIGRATIONS]
    assert len(MIGRATIONS) == SCHEMA_VERSION
    assert MIGRATION_NAMES[SCHEMA_VERSION - 1] == "m029_fact_revisions"
    rows = pg.execute("SELECT version, name FROM _migrations ORDER BY version").fetchall()
    assert rows == sqlite_schema.migrations
    for table, count in sqlite_schema.row_counts.items():
        if table != "search_index":
            assert _count(pg, table) == count, table
    assert pg.execute("SELECT id, value FROM revision_clock").fetchall() == [(1, 1)]


# Rows written by the trigger tests. Sealed columns hold arbitrary bytes.


def _session(conn: psycopg.Connection[Any], sid: str, user: str, parent: str | None = None) -> None:
    conn.execute(
        "INSERT INTO sessions (id, parent_session_id, channel, chat_id, user_id, created_at,"
        " last_active) VALUES (%s, %s, 'cli', 'c', %s, 1.0, 1.0)",
        (sid, parent, user),
    )


def _message(conn: psycopg.Connection[Any], sid: str, seq: int, role: str) -> int:
    row = conn.execute(
        "INSERT INTO messages (session_id, seq_order, role, content, token_estimate, created_at)"
        " VALUES (%s, %s, %s, %s, 3, 1.0) RETURNING id",
        (sid, seq, role, os.urandom(40)),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _note(conn: psycopg.Connection[Any], user: str, sensitive: int = 0) -> int:
    row = conn.execute(
        "INSERT INTO user_memories (user_id, key, content, created_at, updated_at, sensitive,"
        " key_tag) VALUES (%s, %s, %s, 1.0, 1.0, %s, %s) RETURNING id",
        (user, os.urandom(40), os.urandom(40), sensitive, os.urandom(32)),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _fact(conn: psycopg.Connection[Any], user: str, active: int = 1) -> int:
    row = conn.execute(
        "INSERT INTO facts (user_id, subject, category, text, confidence, active, created_at,"
        " updated_at, subject_tag) VALUES (%s, %s, 'preference', %s, 0.8, %s, 1.0, 1.0, %s)"
        " RETURNING id",
        (user, os.urandom(40), os.urandom(40), active, os.urandom(32)),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _digest(conn: psycopg.Connection[Any], user: str, level: int, text: bytes) -> int:
    row = conn.execute(
        "INSERT INTO digests (user_id, level, text, token_estimate, created_at, updated_at)"
        " VALUES (%s, %s, %s, 5, 1.0, 1.0) RETURNING id",
        (user, level, text),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _pending(conn: psycopg.Connection[Any]) -> set[int]:
    return {int(r[0]) for r in conn.execute("SELECT id FROM search_pending")}


def _indexed(conn: psycopg.Connection[Any]) -> set[int]:
    return {int(r[0]) for r in conn.execute("SELECT rowid FROM search_index")}


def _terms(conn: psycopg.Connection[Any]) -> set[int]:
    return {int(r[0]) for r in conn.execute("SELECT doc FROM search_terms")}


def _index_queue(conn: psycopg.Connection[Any]) -> None:
    """What the background indexer does: every queued rowid indexed, the queue emptied."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO search_index (rowid, owner, body, length)"
            " SELECT id, 'owner', 'term', 1 FROM search_pending"
        )
        conn.execute(
            "INSERT INTO search_terms (owner, term, doc, tf)"
            " SELECT 'owner', 'term', id, 1 FROM search_pending"
        )
        conn.execute("DELETE FROM search_pending")


def test_user_and_assistant_messages_are_queued_and_unindexed(
    pg: psycopg.Connection[Any],
) -> None:
    _session(pg, "s1", "u1")
    said = _message(pg, "s1", 1, "user")
    answered = _message(pg, "s1", 2, "assistant")
    _message(pg, "s1", 3, "system")
    _message(pg, "s1", 4, "tool")
    assert _pending(pg) == {said, answered}

    _index_queue(pg)
    pg.execute("UPDATE messages SET content = %s WHERE id = %s", (b"edited", said))
    assert _pending(pg) == {said}
    assert _indexed(pg) == _terms(pg) == {answered}

    pg.execute("DELETE FROM messages WHERE id = %s", (answered,))
    pg.execute("DELETE FROM messages WHERE id = %s", (said,))
    assert _pending(pg) == _indexed(pg) == _terms(pg) == set()


def test_a_message_turned_tool_leaves_the_index(pg: psycopg.Connection[Any]) -> None:
    _session(pg, "s1", "u1")
    said = _message(pg, "s1", 1, "user")
    _index_queue(pg)

    pg.execute("UPDATE messages SET role = 'tool' WHERE id = %s", (said,))

    assert _pending(pg) == _indexed(pg) == set()


def test_explicit_ids_can_be_inserted(pg: psycopg.Connection[Any]) -> None:
    _session(pg, "s1", "u1")
    pg.execute(
        "INSERT INTO messages (id, session_id, seq_order, role, content, token_estimate,"
        " created_at) VALUES (1000, 's1', 1, 'user', %s, 1, 1.0)",
        (b"\x01sealed",),
    )
    pg.execute("INSERT INTO events (id, at, type) VALUES (77, 1.0, 'test')")

    assert _pending(pg) == {1000}
    assert pg.execute("SELECT id FROM events").fetchall() == [(77,)]


def test_an_edited_message_loses_its_vector(pg: psycopg.Connection[Any]) -> None:
    _session(pg, "s1", "u1")
    mid = _message(pg, "s1", 1, "user")
    pg.execute(
        "INSERT INTO message_vectors (message_id, model, vector) VALUES (%s, 'm', %s)",
        (mid, os.urandom(37)),
    )

    pg.execute("UPDATE messages SET content = content, token_estimate = 9 WHERE id = %s", (mid,))
    assert pg.execute("SELECT COUNT(*) FROM message_vectors").fetchone() == (1,)
    pg.execute("UPDATE messages SET content = %s WHERE id = %s", (os.urandom(40), mid))
    assert pg.execute("SELECT COUNT(*) FROM message_vectors").fetchone() == (0,)


def test_notes_are_queued_unless_sensitive(pg: psycopg.Connection[Any]) -> None:
    shown = _note(pg, "u1")
    hidden = _note(pg, "u1", sensitive=1)
    assert _pending(pg) == {-shown}

    _index_queue(pg)
    pg.execute("UPDATE user_memories SET sensitive = 1 WHERE id = %s", (shown,))
    assert _pending(pg) == _indexed(pg) == _terms(pg) == set()

    pg.execute("UPDATE user_memories SET sensitive = 0")
    assert _pending(pg) == {-shown, -hidden}
    pg.execute("DELETE FROM user_memories WHERE id = %s", (hidden,))
    assert _pending(pg) == {-shown}
    _index_queue(pg)
    pg.execute("DELETE FROM user_memories")
    assert _pending(pg) == _indexed(pg) == set()


def test_active_facts_are_queued(pg: psycopg.Connection[Any]) -> None:
    active = _fact(pg, "u1")
    inactive = _fact(pg, "u1", active=0)
    assert _pending(pg) == {-(2**40 + active)}
    assert FACT_ROWID_BASE == 2**40

    _index_queue(pg)
    pg.execute("UPDATE facts SET confidence = 0.9, decay_steps = 1")
    assert (_pending(pg), _indexed(pg)) == (set(), {-(2**40 + active)})
    pg.execute("UPDATE facts SET text = %s WHERE id = %s", (os.urandom(40), active))
    assert (_pending(pg), _indexed(pg)) == ({-(2**40 + active)}, set())

    _index_queue(pg)
    pg.execute("UPDATE facts SET active = 1 - active")
    assert (_pending(pg), _indexed(pg)) == ({-(2**40 + inactive)}, set())
    pg.execute("DELETE FROM facts")
    assert _pending(pg) == _indexed(pg) == set()


def test_digests_with_text_are_queued(pg: psycopg.Connection[Any]) -> None:
    reflection = _digest(pg, "u1", 0, os.urandom(40))
    digest = _digest(pg, "u1", 2, os.urandom(40))
    empty = _digest(pg, "u1", 1, b"")
    assert (REFLECTION_ROWID_BASE, DIGEST_ROWID_BASE) == (2 * 2**40, 3 * 2**40)
    assert _pending(pg) == {-(2 * 2**40 + reflection), -(3 * 2**40 + digest)}

    _index_queue(pg)
    pg.execute("UPDATE digests SET text = '' WHERE id = %s", (reflection,))
    pg.execute("UPDATE digests SET text = %s WHERE id = %s", (os.urandom(40), empty))
    assert _pending(pg) == {-(3 * 2**40 + empty)}
    assert _indexed(pg) == _terms(pg) == {-(3 * 2**40 + digest)}

    pg.execute("UPDATE digests SET stale = 1")
    assert _indexed(pg) == {-(3 * 2**40 + digest)}
    pg.execute("DELETE FROM digests")
    assert _pending(pg) == _indexed(pg) == set()


def test_a_session_handed_over_is_indexed_again(pg: psycopg.Connection[Any]) -> None:
    _session(pg, "s1", "u1")
    _session(pg, "s2", "u1")
    said = _message(pg, "s1", 1, "user")
    answered = _message(pg, "s1", 2, "assistant")
    _message(pg, "s1", 3, "tool")
    elsewhere = _message(pg, "s2", 1, "user")
    _index_queue(pg)

    pg.execute("UPDATE sessions SET user_id = 'u1', last_active = 2.0")
    assert (_pending(pg), _indexed(pg)) == (set(), {said, answered, elsewhere})

    pg.execute("UPDATE sessions SET user_id = 'u2' WHERE id = 's1'")
    assert (_pending(pg), _indexed(pg)) == ({said, answered}, {elsewhere})


MEMORY_CHANGES: list[tuple[str, tuple[Any, ...]]] = [
    ("INSERT INTO user_memories (id, user_id, key, content, created_at, updated_at)"
     " VALUES (1, 'u1', ?, ?, 1.0, 1.0)", (b"k1", b"v1")),
    ("INSERT INTO user_memories (id, user_id, key, content, created_at, updated_at)"
     " VALUES (2, 'u1', ?, ?, 1.0, 1.0)", (b"k2", b"v2")),
    ("INSERT INTO user_memories (id, user_id, key, content, created_at, updated_at)"
     " VALUES (3, 'u2', ?, ?, 1.0, 1.0)", (b"k1", b"v3")),
    ("UPDATE user_memories SET content = ? WHERE id = 1", (b"v1b",)),
    ("UPDATE user_memories SET user_id = 'u3' WHERE id = 3", ()),
    ("UPDATE user_memories SET sensitive = 1 WHERE user_id = 'u1'", ()),
    ("DELETE FROM user_memories WHERE id = 1", ()),
    ("DELETE FROM user_memories WHERE user_id = 'u1'", ()),
    ("DELETE FROM user_memories", ()),
    ("INSERT INTO user_memories (id, user_id, key, content, created_at, updated_at)"
     " VALUES (4, 'u4', ?, ?, 1.0, 1.0), (5, 'u4', ?, ?, 1.0, 1.0)", (b"k4", b"v4", b"k5", b"v5")),
    ("DELETE FROM user_memories WHERE user_id = 'u4'", ()),
]  # fmt: skip
"""Changes to notes, in SQLite's placeholders (PostgreSQL's are ``%s``)."""


_FACT = (
    "INSERT INTO facts (id, user_id, category, text, confidence, created_at, updated_at)"
    " VALUES (?, ?, 'preference', ?, 0.7, 1.0, 1.0)"
)
FACT_CHANGES: list[tuple[str, tuple[Any, ...]]] = [
    (_FACT, (1, "u1", b"t1")),
    (_FACT, (2, "u1", b"t2")),
    (_FACT, (3, "u2", b"t3")),
    ("UPDATE facts SET confidence = 0.8 WHERE id = 1", ()),
    ("UPDATE facts SET user_id = 'u3' WHERE id = 3", ()),
    ("UPDATE facts SET active = 0 WHERE user_id = 'u1'", ()),
    ("DELETE FROM facts WHERE id = 1", ()),
    ("DELETE FROM facts WHERE user_id = 'u1'", ()),
    ("DELETE FROM facts", ()),
    (_FACT, (4, "u4", b"t4")),
    ("DELETE FROM facts WHERE user_id = 'u4'", ()),
]
"""Changes to facts, as :data:`MEMORY_CHANGES` for notes."""


@pytest.mark.parametrize(
    ("changes", "revisions"),
    [(MEMORY_CHANGES, "memory_revisions"), (FACT_CHANGES, "fact_revisions")],
    ids=["memories", "facts"],
)
async def test_revisions_follow_sqlite(
    pg: psycopg.Connection[Any],
    tmp_path: Path,
    changes: list[tuple[str, tuple[Any, ...]]],
    revisions: str,
) -> None:
    db = await Database.open(tmp_path / "conversations.db")

    def state(conn: Any) -> tuple[Any, ...]:
        clock = conn.execute("SELECT value FROM revision_clock").fetchall()
        revs = conn.execute(f"SELECT user_id, rev FROM {revisions} ORDER BY 1").fetchall()  # noqa: S608
        return [tuple(r) for r in clock], [tuple(r) for r in revs]

    start = state(pg)
    try:
        assert await db.read(state) == start
        for statement, args in changes:

            def change(
                conn: sqlite3.Connection, statement: str = statement, args: Any = args
            ) -> Any:
                conn.execute(statement, args)
                return state(conn)

            expected = await db.write(change)
            pg.execute(statement.replace("?", "%s"), args)
            assert state(pg) == expected, statement
    finally:
        await db.close()
    # Every change moved the clock; every user's revision went with their last row.
    assert state(pg)[0][0][0] > start[0][0][0]
    assert state(pg)[1] == []


def _before_fact_revisions(pg: psycopg.Connection[Any]) -> None:
    """Make ``pg`` a store of the version before m029, as an older PicoBot created it."""
    pg.execute("DROP TABLE fact_revisions")
    for event in ("insert", "update", "delete"):
        pg.execute(f"DROP FUNCTION facts_rev_{event}() CASCADE")
    pg.execute("DELETE FROM _migrations WHERE name = 'm029_fact_revisions'")


def test_a_store_of_the_version_before_is_upgraded_in_place(pg: psycopg.Connection[Any]) -> None:
    _before_fact_revisions(pg)
    pg.execute(_FACT.replace("?", "%s"), (1, "u1", b"t1"))
    pg.execute(_FACT.replace("?", "%s"), (2, "u1", b"t2"))

    assert upgrade_schema(pg, SCHEMA_VERSION - 1) == ["m029_fact_revisions"]

    (rev,) = pg.execute("SELECT rev FROM fact_revisions WHERE user_id = 'u1'").fetchone() or (0,)
    assert rev > 0  # the facts there were have their revision
    versions = pg.execute("SELECT COUNT(*), MAX(version) FROM _migrations").fetchone()
    assert versions == (SCHEMA_VERSION, SCHEMA_VERSION)
    pg.execute("UPDATE facts SET confidence = 0.9 WHERE id = 1")  # the triggers are in
    moved = pg.execute("SELECT rev FROM fact_revisions WHERE user_id = 'u1'").fetchone()
    assert moved is not None and moved[0] > rev


async def test_an_instance_starting_on_the_version_before_upgrades_it(
    postgres_url: str, tmp_path: Path
) -> None:
    ring = open_keyring(tmp_path / "keys", KeySettings(), {})
    try:
        await (await Database.open(tmp_path / "c.db", url=postgres_url, keys=ring)).close()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            _before_fact_revisions(conn)
        db = await Database.open(tmp_path / "c.db", url=postgres_url, keys=ring)
        try:
            assert await db.fetchone("SELECT MAX(version) FROM _migrations") == (SCHEMA_VERSION,)
            assert await db.fetchall("SELECT user_id FROM fact_revisions") == []
        finally:
            await db.close()
    finally:
        ring.close()


def test_a_store_too_old_to_upgrade_is_refused_unchanged(pg: psycopg.Connection[Any]) -> None:
    _before_fact_revisions(pg)
    pg.execute("DELETE FROM _migrations WHERE name = 'm028_pending_purges'")

    with pytest.raises(StoreUnavailable, match="m028_pending_purges cannot be applied"):
        upgrade_schema(pg, SCHEMA_VERSION - 2)

    assert "fact_revisions" not in {
        str(r[0])
        for r in pg.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    }


def test_deleting_a_session_cascades(pg: psycopg.Connection[Any]) -> None:
    _session(pg, "parent", "u1")
    _session(pg, "fork", "u1", parent="parent")
    mid = _message(pg, "parent", 1, "user")
    _message(pg, "fork", 1, "user")
    blob = os.urandom(40)
    pg.execute(
        "INSERT INTO message_pins (message_id, session_id, user_id, created_at)"
        " VALUES (%s, 'parent', 'u1', 1.0)",
        (mid,),
    )
    pg.execute(
        "INSERT INTO message_vectors (message_id, model, vector) VALUES (%s, 'm', %s)", (mid, blob)
    )
    pg.execute(
        "INSERT INTO session_summaries (session_id, summary, covered_seq, token_estimate,"
        " updated_at) VALUES ('parent', %s, 1, 1, 1.0)",
        (blob,),
    )
    pg.execute(
        "INSERT INTO current_sessions (channel, chat_id, user_id, session_id)"
        " VALUES ('cli', 'c', 'u1', 'parent')"
    )
    pg.execute(
        "INSERT INTO tool_records (session_id, user_id, name, arguments, result, ok, created_at)"
        " VALUES ('parent', 'u1', %s, %s, %s, 1, 1.0)",
        (blob, blob, blob),
    )
    pg.execute(
        "INSERT INTO fact_progress (session_id, covered_seq, updated_at) VALUES ('parent', 1, 1.0)"
    )

    pg.execute("DELETE FROM sessions WHERE id = 'parent'")

    for table in (
        "message_pins",
        "message_vectors",
        "session_summaries",
        "current_sessions",
        "tool_records",
        "fact_progress",
    ):
        assert _count(pg, table) == 0, table
    assert pg.execute("SELECT session_id FROM messages").fetchall() == [("fork",)]
    assert pg.execute("SELECT parent_session_id FROM sessions").fetchall() == [(None,)]
    assert mid not in _pending(pg)


def test_other_references_cascade_or_clear(pg: psycopg.Connection[Any]) -> None:
    fact = _fact(pg, "u1")
    pg.execute("INSERT INTO fact_sources (fact_id, created_at) VALUES (%s, 1.0)", (fact,))
    pg.execute(
        "INSERT INTO fact_history (fact_id, at, reason, new_text) VALUES (%s, 1.0, 'x', %s)",
        (fact, b"\x01"),
    )
    parent = _digest(pg, "u1", 1, b"\x01")
    child = _digest(pg, "u1", 0, b"\x02")
    pg.execute("UPDATE digests SET parent_id = %s WHERE id = %s", (parent, child))
    inbox = pg.execute(
        "INSERT INTO webhook_inbox (platform, message_id, user_id, chat_id, text, reply_to_json,"
        " received_at) VALUES ('slack', 'm1', 'u1', 'c', %s, '{}', 1.0) RETURNING id",
        (b"\x01",),
    ).fetchone()
    assert inbox is not None
    pg.execute(
        "INSERT INTO outbound_queue (platform, user_id, chat_id, reply_to_json, text,"
        " next_attempt_at, created_at, inbox_id) VALUES ('slack', 'u1', 'c', '{}', %s, 1.0,"
        " 1.0, %s)",
        (b"\x01", inbox[0]),
    )

    pg.execute("DELETE FROM facts")
    pg.execute("DELETE FROM digests WHERE id = %s", (parent,))
    pg.execute("DELETE FROM webhook_inbox")

    assert pg.execute("SELECT COUNT(*) FROM fact_sources").fetchone() == (0,)
    assert pg.execute("SELECT COUNT(*) FROM fact_history").fetchone() == (0,)
    assert pg.execute("SELECT parent_id FROM digests").fetchall() == [(None,)]
    assert pg.execute("SELECT inbox_id FROM outbound_queue").fetchall() == [(None,)]


def test_foreign_keys_can_be_checked_at_commit(pg: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        _session(pg, "fork", "u1", parent="parent")

    with pg.transaction():
        pg.execute("SET CONSTRAINTS ALL DEFERRED")
        _session(pg, "fork", "u1", parent="parent")
        _session(pg, "parent", "u1")

    assert pg.execute("SELECT COUNT(*) FROM sessions").fetchone() == (2,)


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO sessions (id, channel, chat_id, user_id, created_at, last_active,"
        " fork_edit) VALUES ('s', 'cli', 'c', 'u', 1, 1, 2)",
        "INSERT INTO messages (session_id, seq_order, role, content, token_estimate, created_at)"
        " VALUES ('s0', 1, 'robot', '\\x01', 1, 1)",
        "INSERT INTO user_memories (user_id, key, content, created_at, updated_at, sensitive)"
        " VALUES ('u', '\\x01', '\\x01', 1, 1, 2)",
        "INSERT INTO webhook_inbox (platform, message_id, user_id, chat_id, text, reply_to_json,"
        " received_at, status) VALUES ('p', 'm', 'u', 'c', '', '{}', 1, 'lost')",
        "INSERT INTO outbound_queue (platform, user_id, chat_id, reply_to_json, text,"
        " next_attempt_at, created_at, status) VALUES ('p', 'u', 'c', '{}', '', 1, 1, 'lost')",
        "INSERT INTO digests (user_id, level, text, token_estimate, created_at, updated_at)"
        " VALUES ('u', -1, '', 1, 1, 1)",
        "INSERT INTO revision_clock (id, value) VALUES (2, 1)",
        "INSERT INTO user_preferences (user_id, learning, updated_at) VALUES ('u', 2, 1)",
        "INSERT INTO user_preferences (user_id, recall, updated_at) VALUES ('u', -1, 1)",
    ],
)
def test_checks_hold(pg: psycopg.Connection[Any], statement: str) -> None:
    _session(pg, "s0", "u")
    with pytest.raises(psycopg.errors.CheckViolation):
        pg.execute(statement)

"""``picobot store copy``: a real SQLite store copied to a real PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from picobot.cli.main import main
from picobot.config.keys import KeySettings
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.keys import open_keyring
from picobot.store.learned.digests import DigestStore, Provenance
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.postgres.copy import PROGRESS_TABLE, CopyError, StoreCopy
from picobot.store.postgres.keyring import SCHEMA as KEYS_SCHEMA
from picobot.store.retrieval.vectors import store_vectors

T0 = 1_700_000_000.0
USERS = ("tui:alice", "ws:bob", "tg:carol")


@dataclass(frozen=True)
class _Inbound:
    message_id: str
    user_id: str
    chat_id: str
    text: str
    reply_to: dict[str, Any] = field(default_factory=dict)


def _data(tmp_path: Path) -> Path:
    return tmp_path / "data"


async def _seed(tmp_path: Path, messages_per_user: int = 12) -> dict[str, int]:
    """A sealed SQLite store: sessions (one a fork), messages of three users, notes (one
    sensitive), facts, a reflection, events, webhook rows and a vector."""
    from picobot.store.channels.webhooks import WebhookStore

    data = _data(tmp_path)
    ring = open_keyring(data, KeySettings(), {})
    db = await Database.open(data / "conversations.db", keys=ring)
    try:
        sessions, messages = SessionRepo(db), MessageRepo(db)
        notes, facts, digests = MemoryRepo(db), FactStore(db), DigestStore(db)
        for n, user in enumerate(USERS):
            sid = await sessions.create("tui", f"chat{n}", user)
            first = last = None
            for i in range(messages_per_user):
                role = ("user", "assistant", "tool")[i % 3]
                msg = await messages.append(
                    sid, role, f"{user} says hello number {i}", 3, created_at=T0 + i
                )
                first = first or msg
                last = msg
            assert first is not None and last is not None
            await sessions.create("tui", f"chat{n}", user, parent_session_id=sid, before_seq=2)
            await notes.save(user, "city", f"{user} lives in Lyon", max_count=50, now=T0)
            await notes.save(user, "secret", "a sensitive note", max_count=50, sensitive=True)
            await facts.create(
                user,
                Observation("coffee", "preference", f"{user} likes coffee"),
                confidence=0.9,
                actor="test",
                now=T0,
            )
            await digests.add_reflection(
                user,
                Provenance(sid, first.id, last.id, first.seq_order, last.seq_order),
                f"{user} talked about greetings",
                5,
                now=T0,
            )
            await db.write(
                lambda conn, mid=first.id: store_vectors(conn, "m", [(mid, b"\0\1" * 8)])
            )
        webhooks = WebhookStore(db)
        await webhooks.accept("telegram", _Inbound("m1", "tg:carol", "c1", "inbound text"))
        # An event at the top of events' AUTOINCREMENT, then deleted: never handed out again.
        await db.execute_write(
            "INSERT INTO events (at, type, payload_json) VALUES (?, 'test.gone', '{}')", (T0,)
        )
        top = await db.fetchone("SELECT MAX(id) FROM events")
        assert top is not None
        await db.execute_write("DELETE FROM events WHERE id = ?", (top[0],))
        counts = {}
        for table in ("sessions", "messages", "user_memories", "facts", "digests", "events"):
            row = await db.fetchone(f"SELECT COUNT(*) FROM {table}")  # noqa: S608
            assert row is not None
            counts[table] = int(row[0])
        counts["events_top"] = int(top[0])
        return counts
    finally:
        await db.close()
        ring.close()


def _copier(tmp_path: Path, url: str, **kw: Any) -> StoreCopy:
    return StoreCopy(
        _data(tmp_path) / "conversations.db", url, key_settings=KeySettings(), environ={}, **kw
    )


async def _texts(db: Database) -> list[tuple[str, str, str]]:
    rows = await db.fetchall(
        "SELECT s.user_id, m.role, picobot_open(m.content) AS content FROM messages m"
        " JOIN sessions s ON s.id = m.session_id ORDER BY m.id"
    )
    return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]


async def _read(tmp_path: Path, url: str | None) -> dict[str, Any]:
    """What a store opened with its own key store reads."""
    data = _data(tmp_path)
    ring = open_keyring(data, KeySettings(), {}, url=url)
    db = await Database.open(data / "conversations.db", keys=ring, url=url)
    try:
        notes = await db.fetchall(
            "SELECT user_id, picobot_open(key) AS key, picobot_open(content) AS content"
            " FROM user_memories"
            " ORDER BY id"
        )
        facts = await db.fetchall(
            "SELECT user_id, picobot_open(text) AS text FROM facts ORDER BY id"
        )
        digests = await db.fetchall(
            "SELECT user_id, picobot_open(text) AS text FROM digests ORDER BY id"
        )
        forks = await db.fetchall(
            "SELECT id, parent_session_id FROM sessions WHERE parent_session_id IS NOT NULL"
            " ORDER BY id"
        )
        return {
            "messages": await _texts(db),
            "notes": [tuple(map(str, r)) for r in notes],
            "facts": [tuple(map(str, r)) for r in facts],
            "digests": [tuple(map(str, r)) for r in digests],
            "forks": [tuple(map(str, r)) for r in forks],
        }
    finally:
        await db.close()
        ring.close()


def _pg(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def _scalar(url: str, sql: str) -> Any:
    with _pg(url) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return row[0]


async def test_copy_reads_the_same_texts_and_queues_the_index(
    tmp_path: Path, postgres_url: str
) -> None:
    counts = await _seed(tmp_path)
    before = await _read(tmp_path, None)
    report = await _copier(tmp_path, postgres_url).run()

    assert not report.resumed
    assert report.user_keys == len(USERS)
    by_name = {t.name: t for t in report.tables}
    for table in ("sessions", "messages", "user_memories", "facts", "digests", "events"):
        assert by_name[table].rows == counts[table]
    assert by_name["message_vectors"].rows == len(USERS)
    assert by_name["webhook_inbox"].rows == 1
    assert report.rows == sum(t.rows for t in report.tables)
    after = await _read(tmp_path, postgres_url)
    assert after == before
    assert any(text.endswith("hello number 0") for _, _, text in after["messages"])
    # The target's triggers queued every indexed record: user and assistant messages,
    # notes that are not sensitive, active facts and digests with text.
    with _pg(postgres_url) as conn:
        queued = {int(r[0]) for r in conn.execute("SELECT id FROM search_pending")}
        indexed = {
            int(r[0])
            for r in conn.execute("SELECT id FROM messages WHERE role IN ('user', 'assistant')")
        }
        assert indexed <= queued
        notes = [
            int(r[0]) for r in conn.execute("SELECT id FROM user_memories WHERE sensitive = 0")
        ]
        assert {-n for n in notes} <= queued
        assert len(queued) == report.queued == len(indexed) + len(notes) + 2 * len(USERS)
        assert conn.execute("SELECT to_regclass(%s)", (PROGRESS_TABLE,)).fetchone() == (None,)
    # Identity sequences are past every copied id (events' past the deleted top one).
    assert _scalar(postgres_url, "SELECT nextval(pg_get_serial_sequence('events', 'id'))") == (
        counts["events_top"] + 1
    )
    top = _scalar(postgres_url, "SELECT MAX(id) FROM messages")
    assert _scalar(postgres_url, "SELECT nextval(pg_get_serial_sequence('messages', 'id'))") > top


async def test_an_interrupted_copy_resumes_without_duplicates(
    tmp_path: Path, postgres_url: str
) -> None:
    counts = await _seed(tmp_path, messages_per_user=20)
    seen: list[tuple[str, int]] = []

    class Killed(Exception):
        pass

    def stop_in_messages(table: str, rows: int) -> None:
        seen.append((table, rows))
        if table == "messages" and rows >= 14:
            raise Killed

    with pytest.raises(Killed):
        await _copier(tmp_path, postgres_url, batch_rows=7, progress=stop_in_messages).run()
    assert _scalar(postgres_url, "SELECT COUNT(*) FROM messages") == 14
    assert _scalar(
        postgres_url,
        f"SELECT last_rowid FROM {PROGRESS_TABLE} WHERE table_name = 'messages'",  # noqa: S608
    )

    resumed: list[tuple[str, int]] = []
    report = await _copier(
        tmp_path, postgres_url, batch_rows=7, progress=lambda t, n: resumed.append((t, n))
    ).run()
    assert report.resumed
    assert ("sessions", 6) not in resumed  # done before the interruption
    assert resumed[0] == ("messages", 21)  # the rows after the first 14, 7 at a time
    assert _scalar(postgres_url, "SELECT COUNT(*) FROM messages") == counts["messages"]
    assert _scalar(postgres_url, "SELECT COUNT(DISTINCT id) FROM messages") == counts["messages"]
    assert await _read(tmp_path, postgres_url) == await _read(tmp_path, None)


async def test_a_finished_target_is_refused(tmp_path: Path, postgres_url: str) -> None:
    await _seed(tmp_path, messages_per_user=3)
    await _copier(tmp_path, postgres_url).run()
    rows = _scalar(postgres_url, "SELECT COUNT(*) FROM messages")
    with pytest.raises(CopyError, match="already holds a PicoBot store"):
        await _copier(tmp_path, postgres_url).run()
    assert _scalar(postgres_url, "SELECT COUNT(*) FROM messages") == rows


async def test_another_key_store_in_the_target_is_refused(
    tmp_path: Path, postgres_url: str
) -> None:
    await _seed(tmp_path, messages_per_user=3)
    # Another data directory's key store (another master key too) made the target's.
    other = open_keyring(tmp_path / "other", KeySettings(), {}, url=postgres_url)
    other.close()
    with pytest.raises(CopyError, match="has key store"):
        await _copier(tmp_path, postgres_url).run()
    keys = f"SELECT COUNT(*) FROM {KEYS_SCHEMA}.user_keys"  # noqa: S608
    assert _scalar(postgres_url, keys) == 0
    assert _scalar(postgres_url, "SELECT to_regclass('messages')") is None


async def test_a_source_with_clear_text_is_refused(tmp_path: Path, postgres_url: str) -> None:
    await _seed(tmp_path, messages_per_user=3)
    path = _data(tmp_path) / "conversations.db"
    db = await Database.open(path)  # no key store: stored in clear
    try:
        sid = await SessionRepo(db).create("tui", "x", "tui:dave")
        await MessageRepo(db).append(sid, "user", "in clear", 1)
    finally:
        await db.close()
    with pytest.raises(CopyError, match="picobot migrate"):
        await _copier(tmp_path, postgres_url).run()
    assert _scalar(postgres_url, f"SELECT to_regclass('{KEYS_SCHEMA}.meta')") is None


async def test_a_source_without_a_key_store_is_refused(tmp_path: Path, postgres_url: str) -> None:
    db = await Database.open(_data(tmp_path) / "conversations.db")
    await db.close()
    with pytest.raises(CopyError, match="no key store"):
        await _copier(tmp_path, postgres_url).run()


def _with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username or 'postgres'}:{password}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=netloc))


async def test_cli_prints_no_password(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await _seed(tmp_path, messages_per_user=3)
    # A trust-authenticated server ignores the password: it must still not be shown.
    url = _with_password(postgres_url, "s3cr3t-pw")

    status = await asyncio.to_thread(main, ["store", "copy", "--to", url, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "s3cr3t-pw" not in out + err
    result = json.loads(out)
    assert set(result) == {  # the keys docs/cli.md lists
        "source", "target", "resumed", "user_keys", "tables", "rows", "seconds",
        "queued_for_index",
    }  # fmt: skip
    assert result["target"].count("***") == 1
    assert result["rows"] == sum(t["rows"] for t in result["tables"])
    assert {"name", "rows", "checksum"} <= set(result["tables"][0])


def test_cli_needs_a_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "copy"]) != 0
    assert "--to" in capsys.readouterr().err


async def test_cli_killed_mid_copy_resumes(tmp_path: Path, postgres_url: str) -> None:
    """SIGKILL after a reported batch: a second run finishes with every row once."""

    counts = await _seed(tmp_path, messages_per_user=40)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env.update(PICOBOT_DATA__DIR="data", PICOBOT_SECRETS_DIR="")
    command = [
        sys.executable,
        "-m",
        "picobot",
        "store",
        "copy",
        "--to",
        postgres_url,
        "--batch-rows",
        "5",
    ]
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=tmp_path,
        env=env,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    while True:
        line = (await proc.stderr.readline()).decode()
        assert line, "the copy ended before copying messages"
        if line.startswith("copying messages:"):
            proc.send_signal(signal.SIGKILL)
            break
    await proc.wait()
    partial = _scalar(postgres_url, "SELECT COUNT(*) FROM messages")
    assert 0 < partial < counts["messages"]
    done = await asyncio.create_subprocess_exec(
        *command,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await done.communicate()
    assert done.returncode == 0, err.decode()
    assert "resumed" in out.decode()
    assert _scalar(postgres_url, "SELECT COUNT(*) FROM messages") == counts["messages"]
    assert await _read(tmp_path, postgres_url) == await _read(tmp_path, None)


async def test_a_target_that_differs_is_an_error_naming_the_table(
    tmp_path: Path, postgres_url: str
) -> None:
    await _seed(tmp_path, messages_per_user=6)

    class Killed(Exception):
        pass

    def stop(table: str, rows: int) -> None:
        if table == "messages":
            raise Killed

    with pytest.raises(Killed):
        await _copier(tmp_path, postgres_url, batch_rows=4, progress=stop).run()
    with _pg(postgres_url) as conn:  # a copied row changed between the runs
        conn.execute("UPDATE sessions SET chat_id = 'elsewhere' WHERE parent_session_id IS NULL")
    with pytest.raises(CopyError, match=r"does not match the source: sessions \(same 6 rows"):
        await _copier(tmp_path, postgres_url).run()
    # Nothing is dropped: the progress table stays until a copy verifies.
    assert _scalar(postgres_url, f"SELECT to_regclass('{PROGRESS_TABLE}')") is not None


def test_cli_copies_to_the_configured_url(
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:

    asyncio.run(_seed(tmp_path, messages_per_user=3))
    monkeypatch.setenv("PICOBOT_STORE__URL", postgres_url)
    assert main(["store", "copy"]) == 0
    out = capsys.readouterr().out
    assert f"to {postgres_url}" in out
    assert "counts and checksums match" in out
    assert re.search(r"^  messages +\d+$", out, flags=re.MULTILINE)


async def test_a_value_postgresql_refuses_names_its_table(
    tmp_path: Path, postgres_url: str
) -> None:
    await _seed(tmp_path, messages_per_user=3)
    db = await Database.open(_data(tmp_path) / "conversations.db")
    try:
        await db.execute_write(
            "INSERT INTO events (at, type, payload_json) VALUES (?, 'test.nul', ?)", (T0, "a\0b")
        )
    finally:
        await db.close()
    with pytest.raises(CopyError, match="table events cannot be copied"):
        await _copier(tmp_path, postgres_url).run()

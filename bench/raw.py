"""The baseline: the same SQL PicoBot runs, through plain ``sqlite3``, same pragmas.

One synchronous connection with the pragmas of ``picobot.store.connect.connect``
(WAL, ``synchronous=NORMAL``, ``secure_delete=ON``, ``foreign_keys=ON``, busy timeout),
issuing PicoBot's own statements (copied from the repositories, or built by the same
``search_sql``), texts sealed and opened with their owners' keys as PicoBot's are.
What PicoBot adds on top (asyncio and the hop to a connection's thread, row objects,
locks, keyword extraction, the prompt budget) is what the ratios measure.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from picobot.config.keys import KeySettings
from picobot.config.learning import LearningSettings
from picobot.store.connect import install_functions
from picobot.store.conversation.events import record_event
from picobot.store.conversation.messages import _INSERT as APPEND_INSERT
from picobot.store.conversation.messages import _TOUCH as APPEND_TOUCH
from picobot.store.keys import open_keyring
from picobot.store.keys.keyring import KeyRing
from picobot.store.keys.sealing import Sealer
from picobot.store.retrieval.recall import RecallQuery, recall_records
from picobot.store.retrieval.search import SearchHit
from picobot.store.retrieval.search_writes import index_range

INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
    " created_at) VALUES (?1, (SELECT COALESCE(MAX(seq_order), 0) + 1 FROM"
    " messages WHERE session_id = ?1), ?2,"
    " picobot_seal((SELECT user_id FROM sessions WHERE id = ?1), ?3), ?4, ?5)"
    " RETURNING id, seq_order"
)
"""A single-row INSERT, the text sealed with its owner's key looked up in SQL (params:
session, role, text, tokens, time): SQLite only (the write and ceiling benches)."""
CURRENT = (
    "SELECT session_id FROM current_sessions WHERE channel = ? AND chat_id = ? AND user_id = ?"
)
LAST = (
    "SELECT id, session_id, seq_order, role, picobot_open(content) AS content, token_estimate,"
    " created_at"
    " FROM messages WHERE session_id = ? ORDER BY seq_order DESC LIMIT ?"
)
MEMORIES = (
    "SELECT id, user_id, key, picobot_open(content) AS content, created_at, updated_at"
    " FROM user_memories"
    " WHERE user_id = ? ORDER BY updated_at DESC, id DESC LIMIT ?"
)
SUMMARY = (
    "SELECT session_id, picobot_open(summary) AS summary, covered_seq, token_estimate,"
    " updated_at"
    " FROM session_summaries WHERE session_id = ?"
)
PREFERENCES = "SELECT learning, recall FROM user_preferences WHERE user_id = ?"
PARENT = "SELECT parent_session_id, fork_seq, fork_edit FROM sessions WHERE id = ?"
FACTS = (
    "SELECT id, user_id, picobot_open(subject) AS subject, category,"
    " picobot_open(text) AS text, confidence, active, pinned, created_at, updated_at"
    " FROM facts WHERE user_id = ? AND active = 1 AND confidence >= ?"
    " ORDER BY confidence DESC, updated_at DESC, id DESC LIMIT ?"
)
"""The learned facts a prompt shows (learning is on by default), with ``[memory.learning]``'s
default :data:`FACT_FLOOR` and :data:`PROMPT_FACTS`."""
_LEARNING = LearningSettings()
FACT_FLOOR = _LEARNING.min_confidence
PROMPT_FACTS = _LEARNING.max_prompt_facts


@dataclass(frozen=True, slots=True)
class RawTurn:
    """What one raw turn needs that PicoBot computes itself (precomputed, not timed)."""

    user_id: str
    text: str
    reply: str
    terms: Sequence[str]
    now: float


class RawStore:
    """PicoBot's statements on one plain ``sqlite3`` connection (or, made by
    :meth:`postgres`, on one plain psycopg connection)."""

    conn: sqlite3.Connection
    _ring: KeyRing

    def __init__(self, path: Path, busy_timeout_ms: int = 5000) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # As picobot.store.db does on its connections, with the data directory's keys:
        # the same statements find the same (keyed) index terms and open the same texts.
        self._ring = open_keyring(path.parent, KeySettings(), {})
        install_functions(self.conn, Sealer(self._ring))
        for pragma in (
            f"busy_timeout={busy_timeout_ms}",
            "foreign_keys=ON",
            "secure_delete=ON",
            "synchronous=NORMAL",
        ):
            self.conn.execute(f"PRAGMA {pragma}").fetchall()

    @classmethod
    def postgres(cls, url: str, data_dir: Path) -> RawStore:
        """The same statements on one plain psycopg connection to ``url`` (autocommit,
        in the caller's thread), with the store's keys opened by ``data_dir``'s master key.

        Each statement is the one PicoBot sends: the SQLite text rewritten by
        :func:`picobot.store.postgres.dialect.translate` (cached by its text, so once
        per statement), texts sealed and opened in Python with the same keys, as
        :class:`~picobot.store.postgres.driver.PgConnection` does, which is the thin
        adapter used here; ``BEGIN IMMEDIATE`` takes the same writer lock. Not included
        (what the ratio measures): asyncio, the hop to a pooled connection's thread,
        read-only snapshot transactions, PicoBot's row handling and prompt work.
        """
        import psycopg

        from picobot.store.postgres.driver import PgConnection

        store = cls.__new__(cls)
        store._ring = open_keyring(data_dir, KeySettings(), {}, url=url)
        raw = psycopg.connect(url, autocommit=True, application_name="bench-raw")
        # Typed as sqlite3's: PgConnection takes the same calls (as the store casts it).
        store.conn = cast(sqlite3.Connection, PgConnection(raw, Sealer(store._ring)))
        return store

    def close(self) -> None:
        """Close the connection and the key store."""
        self.conn.close()
        self._ring.close()

    def recall(self, query: RecallQuery) -> list[SearchHit]:
        """The retriever's recall statements on this plain connection."""
        return recall_records(self.conn, query)

    def query(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """Run one query and fetch every row."""
        return self.conn.execute(sql, tuple(params)).fetchall()

    def insert_commit(
        self,
        session_id: str,
        role: str,
        content: str,
        tokens: int,
        now: float,
        *,
        index_now: bool = False,
    ) -> tuple[int, int]:
        """A single-row commit: BEGIN IMMEDIATE, PicoBot's INSERT (its trigger queues the
        message for the recall index), COMMIT. ``index_now`` also indexes it in the same
        transaction (a reference figure: what indexing in the commit would cost)."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        row = c.execute(INSERT_MESSAGE, (session_id, role, content, tokens, now))
        msg_id, seq = row.fetchall()[0]
        if index_now:
            index_range(c, msg_id, msg_id)
        c.execute("COMMIT")
        return int(msg_id), int(seq)

    def append(
        self, session_id: str, role: str, content: str, tokens: int, now: float
    ) -> tuple[int, int]:
        """The statements of ``MessageRepo.append`` (its own, imported): touch the session
        (which returns its owner), INSERT the message sealed with the owner's key, record
        the ``message.appended`` event; one commit. Portable: runs on PostgreSQL too."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        owner = c.execute(APPEND_TOUCH, (now, session_id)).fetchall()[0][0]
        args = (session_id, session_id, role, owner, content, tokens, now, None)
        msg_id, seq = c.execute(APPEND_INSERT, args).fetchall()[0]
        payload = {"message_id": msg_id, "role": role, "seq_order": seq}
        record_event(
            c, "message.appended", now, user_id=owner, session_id=session_id, payload=payload
        )
        c.execute("COMMIT")
        return int(msg_id), int(seq)

    def turn(
        self,
        t: RawTurn,
        *,
        window: int = 20,
        max_memories: int = 50,
        max_facts: int = PROMPT_FACTS,
    ) -> int:
        """One turn's statements in PicoBot's order; returns the recall hit count."""
        c = self.conn
        sid = c.execute(CURRENT, ("ws", t.user_id, t.user_id)).fetchall()[0][0]
        msg_id, _ = self.append(sid, "user", t.text, len(t.text) // 4 + 1, t.now)
        rows = c.execute(LAST, (sid, window + 1)).fetchall()
        history = [r for r in reversed(rows) if r[0] != msg_id][-window:]
        c.execute(MEMORIES, (t.user_id, max_memories)).fetchall()
        c.execute(SUMMARY, (sid,)).fetchall()
        c.execute(PREFERENCES, (t.user_id,)).fetchall()
        c.execute(PARENT, (sid,)).fetchall()
        c.execute(FACTS, (t.user_id, FACT_FLOOR - 1e-9, max_facts)).fetchall()
        hits = 0
        if t.terms:
            query = RecallQuery(t.user_id, t.terms, exclude_ids=[*(r[0] for r in history), msg_id])
            hits = len(recall_records(c, query))
        self.append(sid, "assistant", t.reply, len(t.reply) // 4 + 1, t.now)
        return hits

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
from typing import Any

from picobot.config.keys import KeySettings
from picobot.store.connect import install_functions
from picobot.store.keys import open_keyring
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
"""PicoBot's INSERT: the text sealed with its owner's key (params: session, role, text,
tokens, time)."""
TOUCH_SESSION = "UPDATE sessions SET last_active = MAX(last_active, ?) WHERE id = ?"
CURRENT = (
    "SELECT session_id FROM current_sessions WHERE channel = ? AND chat_id = ? AND user_id = ?"
)
LAST = (
    "SELECT id, session_id, seq_order, role, picobot_open(content), token_estimate, created_at"
    " FROM messages WHERE session_id = ? ORDER BY seq_order DESC LIMIT ?"
)
MEMORIES = (
    "SELECT id, user_id, key, picobot_open(content), created_at, updated_at FROM user_memories"
    " WHERE user_id = ? ORDER BY updated_at DESC, id DESC LIMIT ?"
)
SUMMARY = (
    "SELECT session_id, picobot_open(summary), covered_seq, token_estimate, updated_at"
    " FROM session_summaries WHERE session_id = ?"
)


@dataclass(frozen=True, slots=True)
class RawTurn:
    """What one raw turn needs that PicoBot computes itself (precomputed, not timed)."""

    user_id: str
    text: str
    reply: str
    terms: Sequence[str]
    now: float


class RawStore:
    """PicoBot's statements on one plain ``sqlite3`` connection."""

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
        """The statements of ``MessageRepo.append``: INSERT and touch the session, one commit."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        row = c.execute(INSERT_MESSAGE, (session_id, role, content, tokens, now))
        msg_id, seq = row.fetchall()[0]
        c.execute(TOUCH_SESSION, (now, session_id))
        c.execute("COMMIT")
        return int(msg_id), int(seq)

    def turn(self, t: RawTurn, *, window: int = 20, max_memories: int = 50) -> int:
        """One turn's statements in PicoBot's order; returns the recall hit count."""
        c = self.conn
        sid = c.execute(CURRENT, ("ws", t.user_id, t.user_id)).fetchall()[0][0]
        msg_id, _ = self.append(sid, "user", t.text, len(t.text) // 4 + 1, t.now)
        rows = c.execute(LAST, (sid, window + 1)).fetchall()
        history = [r for r in reversed(rows) if r[0] != msg_id][-window:]
        c.execute(MEMORIES, (t.user_id, max_memories)).fetchall()
        c.execute(SUMMARY, (sid,)).fetchall()
        hits = 0
        if t.terms:
            query = RecallQuery(t.user_id, t.terms, exclude_ids=[*(r[0] for r in history), msg_id])
            hits = len(recall_records(c, query))
        self.append(sid, "assistant", t.reply, len(t.reply) // 4 + 1, t.now)
        return hits

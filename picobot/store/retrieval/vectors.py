"""Message vectors: the embeddings behind recall by meaning (migration ``m018``).

``message_vectors`` holds one vector per user or assistant message with content, as
float16 (half the bytes of float32; cosine similarities move by less than 1e-3),
written by the background indexer (:mod:`picobot.tasks.vector_index`) in batches and
read per user: a recall reads the asking user's vectors of the configured model and
ranks them by dot product (the vectors are unit length). A user's vectors are found
through their sessions, so a session handed to another user takes its vectors along.

A vector is user data like the text it was computed from: the foreign key deletes it
with its message (purges of every scope, retention), an edit deletes it (a trigger),
exports include it, and the erasure tests scan the files for its bytes.

numpy is imported inside the functions: it comes with the ``[embed]`` extra, and
nothing here runs while no embedding model is configured.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from picobot.store.retrieval.terms import has_content

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

VECTOR_DTYPE = "<f2"
"""How a vector is stored: little-endian float16."""
SCAN_SPAN = 5000
"""Message ids one indexer read looks at: bounds a read over a database with few
messages left to embed (after a restart, the whole history is passed over in these)."""


def pack(vector: npt.NDArray[Any]) -> bytes:
    """The stored bytes of one vector."""
    import numpy as np

    return np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()


def unpack(blob: bytes) -> npt.NDArray[np.float32]:
    """One stored vector as float32."""
    import numpy as np

    return np.frombuffer(blob, dtype=VECTOR_DTYPE).astype(np.float32)


@dataclass(frozen=True, slots=True)
class Unembedded:
    """Messages to embed, and the id the next scan starts after."""

    rows: list[tuple[int, str]]
    cursor: int
    done: bool
    """True when the scan reached the newest message."""


def unembedded(
    conn: sqlite3.Connection, model: str, after_id: int, limit: int, span: int = SCAN_SPAN
) -> Unembedded:
    """Messages with ids above ``after_id`` that have content and no vector of ``model``.

    At most ``limit`` of them, among at most ``span`` ids. Messages without a word worth
    searching for ("ok", "thanks!") are passed over: recall never wants them.
    """
    newest = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0])
    upto = min(after_id + span, newest)
    found = conn.execute(
        "SELECT m.id, picobot_open(m.content) AS content FROM messages m"
        " WHERE m.id > ? AND m.id <= ?"
        " AND m.role IN ('user', 'assistant') AND NOT EXISTS (SELECT 1 FROM message_vectors v"
        " WHERE v.message_id = m.id AND v.model = ?) ORDER BY m.id LIMIT ?",
        (after_id, upto, model, limit),
    ).fetchall()
    cursor = int(found[-1][0]) if len(found) == limit else upto
    rows = [(int(r[0]), str(r[1])) for r in found if has_content(str(r[1]))]
    return Unembedded(rows, cursor, cursor >= newest)


def store_vectors(conn: sqlite3.Connection, model: str, rows: Sequence[tuple[int, bytes]]) -> int:
    """In the writer: store ``(message_id, vector bytes)`` pairs; how many were stored.

    A message deleted since it was read (a purge meanwhile) gets none.
    """
    stored = 0
    for message_id, blob in rows:
        owner = conn.execute(
            "SELECT s.user_id FROM messages m JOIN sessions s ON s.id = m.session_id"
            " WHERE m.id = ?",
            (message_id,),
        ).fetchone()
        if owner is None:
            continue
        cur = conn.execute(
            "INSERT INTO message_vectors (message_id, model, vector)"
            " VALUES (?, ?, picobot_seal_bytes(?, ?))"
            " ON CONFLICT (message_id) DO UPDATE SET model = excluded.model,"
            " vector = excluded.vector",
            (message_id, model, owner[0], blob),
        )
        stored += cur.rowcount
    return stored


def nearest_messages(
    conn: sqlite3.Connection,
    user_id: str,
    model: str,
    query: npt.NDArray[np.float32],
    *,
    limit: int,
    exclude_ids: Sequence[int] = (),
    min_similarity: float = -1.0,
) -> list[tuple[int, float]]:
    """``user_id``'s messages most similar to ``query``: ``(message_id, cosine)``, best first.

    Reads every vector of the user (through their sessions) in one query and ranks
    them in numpy; vectors of another model or of another length are left out.
    """
    import numpy as np

    rows = conn.execute(
        "SELECT v.message_id, picobot_open_bytes(v.vector) FROM sessions s"
        " JOIN messages m ON m.session_id = s.id"
        " JOIN message_vectors v ON v.message_id = m.id WHERE s.user_id = ? AND v.model = ?",
        (user_id, model),
    ).fetchall()
    width = query.shape[0] * 2
    excluded = set(exclude_ids)
    kept = [
        (int(r[0]), r[1])
        for r in rows
        if r[1] is not None and len(r[1]) == width and int(r[0]) not in excluded
    ]
    if not kept or limit <= 0:
        return []
    ids = np.fromiter((i for i, _ in kept), dtype=np.int64, count=len(kept))
    matrix = np.frombuffer(b"".join(b for _, b in kept), dtype=VECTOR_DTYPE).reshape(len(kept), -1)
    sims = matrix.astype(np.float32) @ query.astype(np.float32)
    # argpartition finds the best ``limit`` without sorting every vector's score.
    top = np.argpartition(-sims, limit - 1)[:limit] if len(kept) > limit else np.arange(len(kept))
    best = sorted(top.tolist(), key=lambda i: (-float(sims[i]), int(ids[i])))
    return [(int(ids[i]), float(sims[i])) for i in best if float(sims[i]) >= min_similarity]


def vector_count(conn: sqlite3.Connection) -> int:
    """Stored vectors (``picobot status``, the erasure tests)."""
    return int(conn.execute("SELECT COUNT(*) FROM message_vectors").fetchone()[0])


class RecentVectors:
    """Vectors of messages a turn embedded already, by message id, for the indexer.

    A turn embeds its message for recall; the indexer stores that vector instead of
    computing it again (half the indexer's work when replies are as long as messages).
    Bounded (``limit``), and the indexer drops every entry its scan has passed, stored
    or not, and those of messages gone once it has caught up, so the vector of a message
    purged meanwhile does not stay in memory.
    """

    def __init__(self, limit: int = 512) -> None:
        self._limit = limit
        self._vectors: OrderedDict[int, npt.NDArray[np.float32]] = OrderedDict()

    def put(self, message_id: int, vector: npt.NDArray[np.float32]) -> None:
        """Keep ``vector`` for ``message_id`` (the oldest goes past ``limit``)."""
        self._vectors[message_id] = vector
        while len(self._vectors) > self._limit:
            self._vectors.popitem(last=False)

    def take(self, message_id: int) -> npt.NDArray[np.float32] | None:
        """The vector kept for ``message_id``, removed; None if there is none."""
        return self._vectors.pop(message_id, None)

    def drop_through(self, message_id: int) -> None:
        """Forget every vector of a message id up to ``message_id``."""
        for mid in [m for m in self._vectors if m <= message_id]:
            del self._vectors[mid]

    def ids(self) -> list[int]:
        """The message ids held."""
        return list(self._vectors)

    def __len__(self) -> int:
        return len(self._vectors)

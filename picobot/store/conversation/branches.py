"""What an edit branch's prompt leaves out: the replaced messages and what came of them.

``/edit`` forks a session just before one of the user's messages
(:meth:`picobot.store.conversation.sessions.SessionRepo.create` with ``before_seq``): the
branch holds a copy of the messages before it and goes on from there; the parent stays
as it was, a branch of its own. The parent's messages from that point on (the edited
message, what followed it, and whatever is said there later) are not the branch's
conversation, yet they stay in the user's history, where recall, the ``memory_search``
tool and the learned facts would bring them back into the branch's prompt.
:func:`hidden_from` names what the prompt leaves out, so the branch reads as if the
edited message had been written the new way in the first place:

- the messages of each ancestor from the *cut* on: the parent's from the edited message
  on; going further up, a fork's parent from the same point, as long as that point
  lies in what the fork copied (an edit of a message a fork wrote itself leaves its
  parent alone);
- the reflections covering any of those messages, and every digest folded from them;
- the learned facts with a source among those messages (a fact confirmed there may
  have been reworded there).

A session that is no edit branch and descends from none hides nothing. A fork made
before ``fork_seq`` was recorded counts as having copied its whole parent.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

MAX_DEPTH = 1000
"""Ancestors followed at most (a guard: an imported database could hold a cycle)."""


@dataclass(frozen=True, slots=True)
class Hidden:
    """The records a session's prompt leaves out, by kind (ids of their own tables)."""

    message_ids: frozenset[int] = field(default_factory=frozenset)
    layer_ids: frozenset[int] = field(default_factory=frozenset)
    """Reflections and digests (``digests.id``)."""
    fact_ids: frozenset[int] = field(default_factory=frozenset)

    def hides(self, kind: str, row_id: int) -> bool:
        """Whether a record of ``kind`` (a recall hit's) is left out."""
        if kind == "message":
            return row_id in self.message_ids
        if kind in ("reflection", "digest"):
            return row_id in self.layer_ids
        return kind == "fact" and row_id in self.fact_ids


NOTHING_HIDDEN = Hidden()


def cuts(conn: sqlite3.Connection, session_id: str) -> list[tuple[str, int]]:
    """(ancestor, first hidden ``seq_order``) for each ancestor with hidden messages,
    the parent first."""
    found: list[tuple[str, int]] = []
    bound: int | None = None
    seen = {session_id}
    node = session_id
    for _ in range(MAX_DEPTH):
        row = conn.execute(
            "SELECT parent_session_id, fork_seq, fork_edit FROM sessions WHERE id = ?", (node,)
        ).fetchone()
        if row is None or row[0] is None or row[0] in seen:
            break
        parent, fork_seq, edit = str(row[0]), row[1], bool(row[2])
        if edit:
            bound = int(fork_seq) if bound is None else min(bound, int(fork_seq))
        elif bound is not None and fork_seq is not None and bound >= int(fork_seq):
            bound = None  # the edit was of a message the fork wrote, not a copy
        if bound is not None:
            found.append((parent, bound))
        seen.add(parent)
        node = parent
    return found


# ?1: the ancestor, ?2: its first hidden seq_order.
_MESSAGES = "SELECT id FROM messages WHERE session_id = ?1 AND seq_order >= ?2"
_FACTS = (
    "SELECT DISTINCT s.fact_id FROM fact_sources s JOIN messages m ON m.id = s.message_id"
    " WHERE s.session_id = ?1 AND m.session_id = ?1 AND m.seq_order >= ?2"
)
_LAYERS = (
    "WITH RECURSIVE up(id) AS (SELECT id FROM digests WHERE level = 0 AND session_id = ?1"
    " AND last_seq >= ?2 UNION SELECT d.parent_id FROM digests d JOIN up ON d.id = up.id"
    " WHERE d.parent_id IS NOT NULL) SELECT id FROM up"
)


def hidden_from(conn: sqlite3.Connection, session_id: str) -> Hidden:
    """What ``session_id``'s prompt leaves out (see the module docstring); in a read."""
    found = cuts(conn, session_id)
    if not found:
        return NOTHING_HIDDEN
    messages: set[int] = set()
    layers: set[int] = set()
    facts: set[int] = set()
    for ancestor, seq in found:
        key = (ancestor, seq)
        messages.update(int(r[0]) for r in conn.execute(_MESSAGES, key).fetchall())
        layers.update(int(r[0]) for r in conn.execute(_LAYERS, key).fetchall())
        facts.update(int(r[0]) for r in conn.execute(_FACTS, key).fetchall())
    return Hidden(frozenset(messages), frozenset(layers), frozenset(facts))

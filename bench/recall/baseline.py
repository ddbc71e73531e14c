"""The baselines, computed in the same run on the same turns and questions.

- **BM25**: every turn's message (as the replay sends it) in an SQLite FTS5 table of
  its own (``porter unicode61``, PicoBot's tokenizer), one conversation at a time;
  the query is every word of the question, OR-ed; turns are taken in ``bm25`` order
  while they fit the budget, each costing what PicoBot's recalled line for it would
  (``- [YYYY-MM-DD] text``, ``ceil(chars / 4) + 1``); the first that does not fit ends
  the fill, as in PicoBot. Reported at 800 tokens (PicoBot's
  ``recall_budget_tokens``) and 4000 (its whole ``context_budget_tokens``).
- **BM25 + neighbours**: the same index, the question's words without stop words
  (PicoBot's list), and each turn taken brings the turns just before and after it in
  its session, hit first, while they fit: the strongest lexical baseline of the
  issue that set the targets. Reported at 4000 tokens.
- **window**: a bot that only sees its history window, in ``continue`` mode: the last
  ``max_session_messages`` messages of the last session, where every turn was
  followed by the model's reply, so the last ``max_session_messages // 2`` turns.
  In ``fresh`` mode its window is empty, so it recalls nothing.
- **window + BM25 @ 800**: both, BM25 leaving out the window's turns (as PicoBot's
  recall leaves out what the prompt holds), in ``continue`` mode.
- **recent @ 4000**: a window-only bot given the whole 4000-token budget: the latest
  turns of the conversation, across sessions, while they fit, each costing a history
  message (``ceil(chars / 4) + 4``) plus the stand-in's reply to it.

A question counts as recalled when every evidence turn is among those selected.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterable

from bench.recall.dataset import Conversation, Question
from bench.recall.metric import MESSAGE_OVERHEAD, estimate
from bench.recall.standin import CHAT_REPLY
from picobot.store.retrieval.terms import STOP_WORDS

RECALL_LINE_CHARS = len("- [2025-01-01] ")
"""What PicoBot's recalled line adds to a turn's text."""
_WORD = re.compile(r"\w+")


def line_cost(text: str) -> int:
    """Tokens of one recalled line, as PicoBot's recall counts them."""
    return math.ceil((len(text) + RECALL_LINE_CHARS) / 4) + 1


class Bm25:
    """One FTS5 table of one conversation's turns, in memory (not PicoBot's database)."""

    def __init__(self, conv: Conversation) -> None:
        self._db = sqlite3.connect(":memory:")
        self._db.execute(
            "CREATE VIRTUAL TABLE turns USING fts5(dia_id UNINDEXED, body,"
            " tokenize = 'porter unicode61')"
        )
        self._db.executemany(
            "INSERT INTO turns (dia_id, body) VALUES (?, ?)",
            [(t.dia_id, t.message()) for s in conv.sessions for t in s.turns],
        )
        self._cost = {t.dia_id: line_cost(t.message()) for s in conv.sessions for t in s.turns}
        self._near: dict[str, list[str]] = {}
        for session in conv.sessions:
            ids = [t.dia_id for t in session.turns]
            for i, dia_id in enumerate(ids):
                self._near[dia_id] = [ids[j] for j in (i - 1, i + 1) if 0 <= j < len(ids)]

    def close(self) -> None:
        """Release the in-memory database."""
        self._db.close()

    def ranked(self, question: str, *, stop_words: bool = False) -> list[str]:
        """Turn ids matching any word of ``question`` (less stop words), best first."""
        words = dict.fromkeys(w.casefold() for w in _WORD.findall(question.replace("_", " ")))
        if stop_words:
            words = {w: None for w in words if w not in STOP_WORDS}
        if not words:
            return []
        query = " OR ".join(f'"{w}"' for w in words)
        rows = self._db.execute(
            "SELECT dia_id FROM turns WHERE turns MATCH ? ORDER BY bm25(turns), rowid",
            (f"body: ({query})",),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def fill(self, question: str, budget: int, exclude: Iterable[str] = ()) -> set[str]:
        """The best-ranked turns that fit ``budget`` tokens, skipping ``exclude``."""
        skip = set(exclude)
        chosen: set[str] = set()
        used = 0
        for dia_id in self.ranked(question):
            if dia_id in skip:
                continue
            cost = self._cost[dia_id]
            if used + cost > budget:
                break
            chosen.add(dia_id)
            used += cost
        return chosen

    def fill_neighbours(self, question: str, budget: int) -> set[str]:
        """Best-ranked turns (stop words left out of the query), each followed by its
        neighbours in its session, while they fit ``budget`` tokens."""
        chosen: set[str] = set()
        used = 0
        for hit in self.ranked(question, stop_words=True):
            for dia_id in (hit, *self._near[hit]):
                if dia_id in chosen:
                    continue
                cost = self._cost[dia_id]
                if used + cost > budget:
                    return chosen
                chosen.add(dia_id)
                used += cost
        return chosen


def window_turns(conv: Conversation, max_session_messages: int) -> list[str]:
    """The turns a window-only bot still sees at the end of the last session."""
    keep = max_session_messages // 2
    last = conv.sessions[-1].turns
    return [t.dia_id for t in last[-keep:]] if keep else []


def recent_turns(conv: Conversation, budget: int) -> list[str]:
    """The latest turns whose messages, with the replies to them, fit ``budget`` tokens."""
    reply = estimate(CHAT_REPLY) + MESSAGE_OVERHEAD
    kept: list[str] = []
    used = 0
    for turn in reversed([t for s in conv.sessions for t in s.turns]):
        cost = estimate(turn.message()) + MESSAGE_OVERHEAD + reply
        if used + cost > budget:
            break
        kept.append(turn.dia_id)
        used += cost
    return kept


def hits(
    conv: Conversation,
    budgets: Iterable[int],
    *,
    recall_budget: int,
    context_budget: int,
    window_messages: int,
) -> dict[str, dict[int, bool]]:
    """Baseline name -> question index -> whether all its evidence was selected.

    BM25 at each of ``budgets``; the window of ``window_messages`` alone and with BM25
    at ``recall_budget``; the most recent turns filling ``context_budget``.
    """
    index = Bm25(conv)
    window = window_turns(conv, window_messages)
    recent = recent_turns(conv, context_budget)
    out: dict[str, dict[int, bool]] = {}

    def put(name: str, question: Question, chosen: Iterable[str]) -> None:
        out.setdefault(name, {})[question.index] = set(question.evidence) <= set(chosen)

    try:
        for question in conv.questions:
            for budget in budgets:
                put(f"bm25@{budget}", question, index.fill(question.text, budget))
            chosen = index.fill_neighbours(question.text, context_budget)
            put(f"bm25+neighbours@{context_budget}", question, chosen)
            put("window (continue)", question, window)
            both = set(window) | index.fill(question.text, recall_budget, window)
            put(f"window+bm25@{recall_budget} (continue)", question, both)
            put(f"recent@{context_budget}", question, recent)
    finally:
        index.close()
    return out

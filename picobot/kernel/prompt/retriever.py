"""The memory retriever: every turn's prompt within the token budget, cache-friendly.

A prompt is, from the most stable part to the least: the system prompt; one context
message holding user memories, learned facts (while learning is on) and the session
summary (only when history older than the window exists), each a delimited ``<data>``
block the model is told not to obey; the history window; the records recalled for the
current message (past messages and, while learning is on, session reflections and
digests), in a message of their own; and the current message.

Every message gets its own recall, as a fresh session would: the records ranked for
*this* message fill what the rest of the prompt leaves. They sit after the window, as
the most volatile part: the next turn replaces them with its own (the answer they
served is in the window by then), so nothing recalled for an earlier message crowds
out a later one. An epoch's first message gets at least ``recall_budget_tokens``;
a later one at least half of it, and beyond that what the window will not need to
grow by a block (or to the end of the epoch), so a heavy window re-sends little
recall each turn and a light one (short messages, the usual case) leaves recall
nearly all of the budget. A model's profile may cap a later message's recall
(``later_recall_tokens``; the bundled model: 48), since every turn re-sends it.

Consecutive turns still share a long prefix, so model servers reuse their cache
(llama.cpp's KV cache, OpenAI's and Anthropic's prompt caching): system prompt,
context message and window stay in place for an *epoch*, and each turn appends the
last exchange. An epoch ends when the window would pass ``max_session_messages``,
when what the prefix leaves falls below half ``recall_budget_tokens`` (recall keeps
its share; the window gives way), when the prompt would pass the budget, when a record
recalled for the turn was deleted (a tool round's rebuild), or when the process
restarts; the next one starts from the last ``max_session_messages -
window_drop_messages`` messages (at most ``epoch_keep_messages``, when the profile sets
it: a new epoch's window is evaluated again), so the window drops messages in blocks
rather than one per turn. A note saved during an epoch does not end it: it stands in
the window, as a context message before the message that first saw it, until the next
epoch renders it in the notes block; a note shown that was deleted or changed ends the
epoch, so it leaves the prompt at once. What a turn re-sends is its recall and its
message: the price of recall that answers every message (docs/memory.md has the
figures).

An epoch's first prompt is built by the documented trim order
(:mod:`picobot.kernel.prompt.parts`): recall fills what the other parts leave and
never gets less than ``recall_budget_tokens`` while anything less valuable can give
way. The system prompt and the current message are never dropped; a single item
larger than its share (a quarter of the budget; the current message: whatever is
left after the system prompt) is cut with a visible ``[... truncated]`` marker.
``PromptRequest.reserve_tokens`` (tool rounds) comes off the budget.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

from picobot.access.context import Action, Scope
from picobot.config.learning import LearningSettings
from picobot.config.settings import MemorySettings
from picobot.kernel.prompt import PromptRequest, as_chat, recall_block
from picobot.kernel.prompt.epoch import Epoch, Fetched
from picobot.kernel.prompt.parts import (
    PROTECTED_MESSAGES,
    Budget,
    Item,
    Parts,
    join_recall,
    recall_message_lines,
    render_added_notes,
    render_context,
    render_recall,
)
from picobot.llm.base import ChatMessage
from picobot.memory.facts_block import render_facts_block
from picobot.recall.keywords import extract_terms
from picobot.recall.meaning import VectorRecall
from picobot.store.conversation.branches import NOTHING_HIDDEN, Hidden, hidden_from
from picobot.store.conversation.memories import GLOBAL_USER, Memory
from picobot.store.conversation.memory_cache import CachedMemories, MemoryCache
from picobot.store.conversation.messages import StoredMessage, existing_ids, last_messages
from picobot.store.conversation.preferences import read_preferences
from picobot.store.conversation.sessions import existing_sessions
from picobot.store.conversation.summaries import Summary, get_summary
from picobot.store.db import Database
from picobot.store.learned.digests import layers_intact
from picobot.store.learned.fact_cache import FactCache
from picobot.store.learned.facts import Fact
from picobot.store.retrieval.recall import RecallQuery, VectorQuery, fuse_vectors, recall_records
from picobot.store.retrieval.search import SearchHit
from picobot.text.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    TokenEstimator,
    truncate_to_tokens,
)
from picobot.text.untrusted import escape_data, one_line

log = logging.getLogger(__name__)

MAX_EPOCHS = 10_000
"""Sessions whose epoch is remembered (least recently used go first)."""


class MemoryRetriever:
    """Builds budgeted prompts from memories, summary, recall and the history window."""

    def __init__(
        self,
        *,
        db: Database,
        estimator: TokenEstimator,
        settings: MemorySettings,
        cache: MemoryCache | None = None,
        learning: LearningSettings | None = None,
        vectors: VectorRecall | None = None,
    ) -> None:
        self._db = db
        # Recall by meaning, when an embedding model is configured.
        self.vectors = vectors
        # Learned facts enter the prompt only while learning is on.
        self._learning = learning if learning is not None and learning.enabled else None
        self._est = estimator
        self._cfg = settings
        self._budget = Budget(estimator, settings.recall_budget_tokens)
        self._epochs: OrderedDict[str, Epoch] = OrderedDict()
        # Users' memories and facts, reread only when they changed (any process's change).
        self.memory_cache = cache if cache is not None else MemoryCache()
        self.fact_cache = FactCache()

    async def prune_epochs(self, *, records: bool = False) -> int:
        """Forget the epochs (and the text they recalled) of sessions no longer stored:
        a purged session has no next turn to replace its epoch. Returns how many.

        ``records`` (after a purge, retention or a cap deleted something, in any
        process): also the epochs whose recalled records are gone or changed, and every
        epoch's kept facts block (the next turn renders it again from the store, byte
        for byte the same if nothing changed), so no deleted text stays in memory.
        """
        held = list(self._epochs.items())
        if not held:
            return 0

        def stale(conn: sqlite3.Connection) -> list[str]:
            alive = existing_sessions(conn, [sid for sid, _ in held])
            kept: set[int] = set()
            if records:
                kept = existing_ids(conn, set().union(*(e.shown_ids() for _, e in held)))
            return [
                sid
                for sid, epoch in held
                if sid not in alive
                or (records and not (epoch.shown_ids() <= kept))
                or (records and not layers_intact(conn, epoch.shown_layers()))
            ]

        gone = await self._db.read(stale)
        kept_epochs = dict(held)
        for sid in gone:
            if self._epochs.get(sid) is kept_epochs[sid]:  # not one built meanwhile
                del self._epochs[sid]
        if records:
            for epoch in kept_epochs.values():
                epoch.facts = None
        return len(gone)

    def forget(self, session_id: str) -> None:
        """Drop the session's epoch: messages of it were deleted (undo, rewind, a purge),
        so its next prompt is built afresh from what is stored."""
        self._epochs.pop(session_id, None)

    def inherit(self, parent_id: str, child_id: str) -> None:
        """Start a fork's epoch where its parent's stands (the fork holds the same messages
        at the same places), so its first prompt shares the parent's prefix, which the
        model has evaluated, instead of starting a window of its own."""
        epoch = self._epochs.get(parent_id)
        if epoch is None:
            return
        self._epochs[child_id] = Epoch(
            epoch.start_seq,
            epoch.with_summary,
            epoch.with_facts,
            epoch.message_id,
            list(epoch.recalled),
            epoch.facts,
            list(epoch.notes),
            epoch.known,
            list(epoch.added),
        )

    def _item(self, text: str, cap: int) -> Item:
        text = truncate_to_tokens(self._est, text, cap)
        return Item(text, self._est.estimate(text) + 1)

    async def build(self, request: PromptRequest) -> list[ChatMessage]:
        """The prompt for one turn: system, context, history, recall, current message."""
        # The item cap stays a quarter of the whole budget, so memories' lines cached
        # with it are reused by a tool round's rebuilt prompt.
        item_cap = max(16, self._cfg.context_budget_tokens // 4)
        budget = self._cfg.context_budget_tokens - request.reserve_tokens
        system = ChatMessage("system", request.system_prompt)
        room = budget - self._budget.cost(system.content)
        current_text = request.current.content
        if self._budget.cost(current_text) > room:
            cut = max(0, room - MESSAGE_OVERHEAD_TOKENS)
            current_text = truncate_to_tokens(self._est, current_text, cut)
        room -= self._budget.cost(current_text)
        current = ChatMessage("user", current_text)

        sid = request.session_id
        epoch = self._epochs.get(sid)
        # The message is embedded while the keyword read runs, then fused in a short read.
        pending = None
        if self.vectors is not None:
            whole = current_text == request.current.content  # else not the stored message's
            pending = self.vectors.start(current_text, request.current.id if whole else None)
        try:
            fetched = await self._db.read(lambda conn: self._fetch(conn, request, epoch, pending))
        except BaseException:
            if pending is not None:
                pending.cancel()
            raise
        if pending is not None:
            fetched = await self._with_meaning(request, fetched, pending)
        memories = self._memory_items(fetched.memories, item_cap)
        facts_key = tuple(fetched.facts)
        if epoch is not None and epoch.facts is not None and epoch.facts[0] == facts_key:
            facts = epoch.facts[1]
        else:
            facts = self._facts_item(fetched.facts)
        window = [self._capped(m, item_cap) for m in fetched.window]
        if epoch is not None and fetched.records_intact:
            context = (memories, facts if epoch.with_facts else None)
            body = self._continue(epoch, request, fetched, window, context, item_cap, room)
            if body is not None:
                epoch.facts = (facts_key, facts)
                self._epochs.move_to_end(sid)
                return [system, *body, current]
        epoch, body = self._start(request, fetched, window, (memories, facts), item_cap, room)
        epoch.facts = (facts_key, facts)
        self._epochs[sid] = epoch
        self._epochs.move_to_end(sid)
        while len(self._epochs) > MAX_EPOCHS:
            self._epochs.popitem(last=False)
        return [system, *body, current]

    def _continue(
        self,
        epoch: Epoch,
        request: PromptRequest,
        fetched: Fetched,
        window: list[StoredMessage],
        context: tuple[list[Item], Item | None],
        item_cap: int,
        room: int,
    ) -> list[ChatMessage] | None:
        """The epoch's prefix with this turn's recall and message after it, or None
        when it no longer holds."""
        history = [m for m in window if m.seq_order >= epoch.start_seq]
        complete = not window or window[0].seq_order <= epoch.start_seq
        if not complete or len(history) > self._cfg.max_session_messages:
            return None
        memories, facts = context
        if not epoch.shown_notes() <= {item.text for item in memories}:
            return None  # a note shown was deleted or changed: it leaves the prompt now
        # Notes saved during the epoch stand before this message, then stay in place.
        new = [item for item in memories if item.text not in epoch.known]
        added = [*epoch.added, (request.current.seq_order, new)] if new else epoch.added
        summary = self._summary_item(fetched.summary, item_cap) if epoch.with_summary else None
        body = self._body(epoch.notes, facts, summary, history, added)
        used = sum(self._budget.cost(m.content) for m in body)
        # A tool round builds the turn's prompt again: the same records.
        lines = epoch.recalled if epoch.message_id == request.current.id else None
        if not fetched.recall:
            lines = []  # /recall off mid-turn: the tool round's prompt drops them too
        if lines is None:
            left = room - used - self._budget.recall_framing()
            floor = self._cfg.recall_budget_tokens // 2
            most = self._cfg.later_recall_tokens  # the model's cap (0: none)
            if most:
                floor = min(floor, most)
            if fetched.hits and left < floor:
                return None  # the window gives way, not this message's recall share
            # Beyond its share, what the window will not need to grow by a block (or to
            # the end of the epoch, if more): a heavy window re-sends less each turn.
            slots = self._cfg.max_session_messages - len(history) - 2
            grow = self._growth(history, max(slots, self._drop_block()))
            share = max(floor, left - grow)
            lines = recall_block.pack(
                fetched.hits,
                self._est,
                budget=min(share, most) if most else share,
                item_cap=item_cap,
                skip_texts=[m.content for m in history],
            )
        shown = recall_message_lines(lines) if lines else []
        if used + (self._budget.recall_lines_cost(shown) if lines else 0) > room:
            return None
        tail = [ChatMessage("user", join_recall(shown))] if lines else []
        epoch.message_id, epoch.recalled = request.current.id, lines
        if new:
            epoch.added, epoch.known = added, epoch.known | {item.text for item in new}
        return [*body, *tail]

    def _start(
        self,
        request: PromptRequest,
        fetched: Fetched,
        window: list[StoredMessage],
        context: tuple[list[Item], Item | None],
        item_cap: int,
        room: int,
    ) -> tuple[Epoch, list[ChatMessage]]:
        """A new epoch: the last messages with room to grow, trimmed to the budget."""
        block = self._drop_block()
        keep = self._cfg.max_session_messages - block
        if self._cfg.epoch_keep_messages:
            keep = min(keep, self._cfg.epoch_keep_messages)
        if len(window) > keep:
            window = window[len(window) - keep :]
        parts = Parts(memories=list(context[0]), facts=context[1])
        protected = min(PROTECTED_MESSAGES, len(window))
        parts.older = window[: len(window) - protected]
        parts.recent = window[len(window) - protected :]
        summary = self._summary_item(fetched.summary, item_cap)
        if summary is not None:
            if window and window[0].seq_order > 1:  # history older than the window exists
                parts.summary = summary
            else:
                parts.pending_summary = summary
        # Recall fills what the rest leaves (less room for the window to grow by a
        # block), and never less than its own budget.
        rest = self._budget.estimate(parts) + self._budget.recall_framing()
        grow = self._growth(window, block)
        parts.recall = recall_block.pack(
            fetched.hits,
            self._est,
            budget=max(self._cfg.recall_budget_tokens, room - rest - grow),
            item_cap=item_cap,
            skip_texts=[m.content for m in window],
        )
        self._budget.trim(parts, room)
        history = parts.history()
        start = history[0].seq_order if history else request.current.seq_order
        epoch = Epoch(
            start,
            parts.summary is not None,
            parts.facts is not None,
            request.current.id,
            parts.recall,
            notes=list(parts.memories),
            known=frozenset(item.text for item in context[0]),
        )
        body = self._body(parts.memories, parts.facts, parts.summary, history)
        if parts.recall:
            body.append(ChatMessage("user", render_recall(parts.recall)))
        return epoch, body

    def _body(
        self,
        memories: list[Item],
        facts: Item | None,
        summary: Item | None,
        history: Sequence[StoredMessage],
        added: Sequence[tuple[int, list[Item]]] = (),
    ) -> list[ChatMessage]:
        """Context message and history, with the notes saved during the epoch each before
        the message they were first shown with: the part of the prompt an epoch keeps."""
        context = render_context(memories, facts, summary)
        body = [] if context is None else [ChatMessage("user", context)]
        notes = list(added)
        for message in history:
            while notes and notes[0][0] <= message.seq_order:
                body.append(ChatMessage("user", render_added_notes(notes.pop(0)[1])))
            body.append(as_chat(message))
        body += [ChatMessage("user", render_added_notes(items)) for _, items in notes]
        return body

    def _drop_block(self) -> int:
        """Messages an epoch leaves room for: at most half the window (0: it slides)."""
        return min(self._cfg.window_drop_messages, self._cfg.max_session_messages // 2)

    def _growth(self, window: Sequence[StoredMessage], block: int) -> int:
        """Room kept for the window to grow by ``block`` messages (none without history)."""
        if not window or block <= 0:
            return 0
        average = sum(self._budget.cost(m.content) for m in window) // len(window)
        return average * block

    def _capped(self, message: StoredMessage, cap: int) -> StoredMessage:
        # The estimate stored with the message spares a tokenizer call (the local
        # model's) for the many far below the cap; the margin covers another estimator.
        if message.token_estimate <= cap // 2 or self._est.estimate(message.content) <= cap:
            return message
        return replace(message, content=truncate_to_tokens(self._est, message.content, cap))

    def _facts_item(self, facts: Sequence[Fact]) -> Item | None:
        """The learned-facts block body within its share of the budget (None if empty)."""
        if self._learning is None or not facts:
            return None
        share = int(self._cfg.context_budget_tokens * self._learning.prompt_share)
        text = render_facts_block(facts, self._est, share)
        return Item(text, self._est.estimate(text) + 1) if text else None

    def _summary_item(self, summary: Summary | None, item_cap: int) -> Item | None:
        if summary is None or not summary.summary.strip():
            return None
        return self._item(summary.summary, item_cap)

    def _recall_query(
        self, request: PromptRequest, window: Sequence[StoredMessage], hidden: Hidden
    ) -> RecallQuery | None:
        """The turn's recall, or None when there is none (off, or nothing to look for).

        An edit branch's ``hidden`` records (what it replaced) are never recalled."""
        cfg = self._cfg
        if not cfg.enable_recall or cfg.recall_budget_tokens <= 0:
            return None
        terms = extract_terms(request.current.content, cfg.recall_max_terms)
        if not terms and self.vectors is None:
            return None
        # What the prompt holds already: the window and the current message.
        return RecallQuery(
            request.ctx.user_id,
            terms,
            exclude_ids=[*(m.id for m in window), request.current.id, *hidden.message_ids],
            exclude_layers=hidden.layer_ids,
            include_digests=self._learning is not None and self._learning.recall_digests,
            max_digests=0 if self._learning is None else self._learning.recall_max_digests,
        )

    async def _with_meaning(
        self, request: PromptRequest, fetched: Fetched, pending: asyncio.Task[VectorQuery | None]
    ) -> Fetched:
        """The keyword matches fused with the nearest messages in meaning, in context."""
        recall = fetched.recall
        query = self._recall_query(request, fetched.window, fetched.hidden) if recall else None
        if query is None:
            pending.cancel()
            return fetched
        vectors = await pending
        hits = await self._db.read(lambda conn: fuse_vectors(conn, query, fetched.hits, vectors))
        return replace(fetched, hits=hits)

    def _fetch(
        self,
        conn: sqlite3.Connection,
        request: PromptRequest,
        epoch: Epoch | None,
        pending: asyncio.Task[VectorQuery | None] | None = None,
    ) -> Fetched:
        """Every query of the turn's context, in one read transaction (a reader thread).

        One trip to the database thread instead of one per query, and every part sees
        the same snapshot.
        """
        cfg = self._cfg
        sid, user = request.session_id, request.ctx.user_id
        window = last_messages(conn, sid, cfg.max_session_messages + 1)
        window = [m for m in window if m.id != request.current.id][-cfg.max_session_messages :]
        memories: list[CachedMemories] = []
        if cfg.enable_user_memories and cfg.max_user_memories > 0:
            memories.append(self.memory_cache.memories(conn, user, cfg.max_user_memories))
            # A probe, not a request: users without the grant just get no shared notes.
            if request.ctx.has(Action.MEMORY_READ, Scope.GLOBAL):
                shared = self.memory_cache.memories(conn, GLOBAL_USER, cfg.max_user_memories)
                memories.append(shared)
        summary = None
        if cfg.include_summary_on_truncation and window:
            summary = get_summary(conn, sid)
        # The user's /recall switch, read in this snapshot: off, nothing recalled.
        recall = read_preferences(conn, user).recall
        hidden = hidden_from(conn, sid) if recall else NOTHING_HIDDEN
        facts: list[Fact] = []
        if recall and self._learning is not None and self._learning.max_prompt_facts > 0:
            most, floor = self._learning.max_prompt_facts, self._learning.min_confidence
            cached = self.fact_cache.facts(conn, user, floor, most + len(hidden.fact_ids))
            facts = [f for f in cached.items if f.id not in hidden.fact_ids][:most]
        hits: list[SearchHit] = []
        query = self._recall_query(request, window, hidden) if recall else None
        if query is not None:
            # With a vector on its way (``pending``), the matches alone: fused later.
            hits = recall_records(conn, query, expand=pending is None)
        intact = True
        if epoch is not None and epoch.message_id == request.current.id:
            # A tool round reuses the turn's records: unless one was deleted meanwhile.
            shown = epoch.shown_ids()
            intact = len(existing_ids(conn, shown)) == len(shown)
            intact = intact and layers_intact(conn, epoch.shown_layers())
        return Fetched(window, memories, summary, facts, hits, intact, recall, hidden)

    def _memory_items(self, groups: Sequence[CachedMemories], item_cap: int) -> list[Item]:
        """The memories' prompt lines, at most ``max_user_memories`` (own ones first).

        Each group's lines are made once and kept with it while its memories are
        unchanged (the cache hands out the same object), so they render byte for byte
        the same from turn to turn.
        """
        items: list[Item] = []
        for group in groups:
            rendered = group.rendered
            if rendered is None or rendered[0] is not self._est or rendered[1] != item_cap:
                lines = [self._item(self._memory_line(m), item_cap) for m in group.items]
                rendered = group.rendered = (self._est, item_cap, lines)
            items += rendered[2]
        return items[: self._cfg.max_user_memories]

    @staticmethod
    def _memory_line(memory: Memory) -> str:
        shared = " (shared)" if memory.user_id == GLOBAL_USER else ""
        # One line each: a memory cannot start a line posing as another (shared) one.
        return f"- {memory.key}{shared}: {escape_data(one_line(memory.content))}"

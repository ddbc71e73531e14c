"""What the memory retriever keeps of a session between turns, and what one turn reads.

An :class:`Epoch` is the part of a session's prompt that stays in place across turns
(see :mod:`picobot.kernel.prompt.retriever`); :class:`Fetched` is one turn's read of the
store, taken in one snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from picobot.kernel.prompt.parts import Item
from picobot.kernel.prompt.recall_block import RecallLine
from picobot.store.conversation.branches import NOTHING_HIDDEN, Hidden
from picobot.store.conversation.memory_cache import CachedMemories
from picobot.store.conversation.messages import StoredMessage
from picobot.store.conversation.summaries import Summary
from picobot.store.learned.digests import LAYER_KINDS
from picobot.store.learned.facts import Fact
from picobot.store.retrieval.search import SearchHit


@dataclass(slots=True)
class Epoch:
    """What stays in place across a session's turns (where the window starts, whether
    the summary and facts are shown), and the records recalled for the latest message,
    which a tool round's rebuild of that turn's prompt reuses."""

    start_seq: int
    with_summary: bool
    with_facts: bool
    message_id: int
    """The message the records below were recalled for."""
    recalled: list[RecallLine] = field(default_factory=list)
    facts: tuple[tuple[Fact, ...], Item | None] | None = None
    """The facts last rendered and their block, reused while they are unchanged."""
    notes: list[Item] = field(default_factory=list)
    """The memories' lines of the context message (what the budget kept of them)."""
    known: frozenset[str] = frozenset()
    """Every memory line that existed when the epoch began or since (shown or trimmed)."""
    added: list[tuple[int, list[Item]]] = field(default_factory=list)
    """Memory lines saved during the epoch, each group with the ``seq_order`` of the first
    message it stands before (in the window, where the turn that first saw it put it)."""

    def shown_notes(self) -> set[str]:
        """The memory lines the epoch's prompts show."""
        return {item.text for item in self.notes} | {
            item.text for _, items in self.added for item in items
        }

    def shown_ids(self) -> set[int]:
        """The messages recalled (other kinds' row ids are another number space)."""
        return {line.hit.row_id for line in self.recalled if line.hit.kind == "message"}

    def shown_layers(self) -> dict[int, float]:
        """The reflections and digests recalled, with the version shown."""
        return {
            line.hit.row_id: line.hit.created_at
            for line in self.recalled
            if line.hit.kind in LAYER_KINDS
        }


@dataclass(frozen=True, slots=True)
class Fetched:
    """What the database holds for one turn's context."""

    window: list[StoredMessage]
    memories: list[CachedMemories]  # the user's, then the shared ones if granted
    summary: Summary | None
    facts: list[Fact]
    hits: list[SearchHit]
    records_intact: bool
    """Every record the epoch recalled still exists (a purge may have removed some)."""
    recall: bool = True
    """The user lets the bot recall for them (``/recall``); off: no records, facts or digests."""
    hidden: Hidden = NOTHING_HIDDEN
    """What an edit branch leaves out of recall and facts (read only with recall on)."""

"""What the memory retriever keeps of a session between turns, and what one turn reads.

An :class:`Epoch` is the part of a session's prompt that stays in place across turns
(see :mod:`picobot.kernel.prompt.retriever`); :class:`Fetched` is one turn's read of the
store, taken in one snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from picobot.kernel.prompt.parts import Item
from picobot.kernel.prompt.recall_block import RecallLine
from picobot.store.conversation.memory_cache import CachedMemories
from picobot.store.conversation.messages import StoredMessage
from picobot.store.conversation.summaries import Summary
from picobot.store.learned.digests import LAYER_KINDS
from picobot.store.learned.facts import Fact
from picobot.store.retrieval.search import SearchHit


@dataclass(slots=True)
class Epoch:
    """What stays in place across a session's turns: where the window starts, and the
    records recalled for each of its messages."""

    start_seq: int
    with_summary: bool
    with_facts: bool
    inserts: dict[int, list[RecallLine]] = field(default_factory=dict)
    facts: tuple[tuple[Fact, ...], Item | None] | None = None
    """The facts last rendered and their block, reused while they are unchanged."""

    def shown_ids(self) -> set[int]:
        """The messages recalled (other kinds' row ids are another number space)."""
        return {h.row_id for h in self._hits() if h.kind == "message"}

    def shown_layers(self) -> dict[int, float]:
        """The reflections and digests recalled, with the version shown."""
        return {h.row_id: h.created_at for h in self._hits() if h.kind in LAYER_KINDS}

    def unshown(self, hits: Iterable[SearchHit], messages: set[int]) -> list[SearchHit]:
        """``hits`` the prompt does not hold yet: neither recalled in this epoch nor
        among ``messages`` (the history's ids)."""
        shown = self.shown_ids() | messages
        layers = self.shown_layers()
        return [h for h in hits if h.row_id not in (layers if h.kind in LAYER_KINDS else shown)]

    def _hits(self) -> list[SearchHit]:
        return [line.hit for lines in self.inserts.values() for line in lines]


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

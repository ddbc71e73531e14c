"""Search of one user's own records: the same keywords and index as recall.

The words are turned into terms the way recall does (stop words and FTS syntax never
reach the MATCH expression as operators); an operator names the user, a chat user
searches their own records only.
"""

from __future__ import annotations

from picobot.recall.filters import KINDS, SearchFilter, filtered_search, parse_kinds, parse_since
from picobot.recall.keywords import extract_terms
from picobot.recall.meaning import VectorRecall
from picobot.store.retrieval.search import SearchHit, SearchIndex
from picobot.tools.memory_search import format_hits, ranked


class SearchService:
    """Terms of a query and the hits they find."""

    def __init__(
        self, index: SearchIndex, *, max_terms: int, meaning: VectorRecall | None = None
    ) -> None:
        self.index = index
        self.max_terms = max_terms
        self.meaning = meaning
        """Recall by meaning, when an embedding model is configured."""

    def terms(self, text: str) -> list[str]:
        """The search terms of ``text`` (none when every word is too common)."""
        return extract_terms(text, self.max_terms)

    async def hits(self, user_id: str, terms: list[str], limit: int) -> list[SearchHit]:
        """``user_id``'s records matching any of ``terms``, best match first."""
        return await self.index.search(user_id, terms, limit=limit) if terms else []

    async def filtered(
        self, user_id: str, terms: list[str], limit: int, flt: SearchFilter
    ) -> list[SearchHit]:
        """``user_id``'s records of the kinds, session and time of ``flt`` matching any
        of ``terms``, best match first (matches only)."""
        return await filtered_search(self.index, user_id, terms, limit, flt)

    async def ranked(
        self, user_id: str, terms: list[str], limit: int, *, text: str = "", context: bool = True
    ) -> list[SearchHit]:
        """The best ``limit`` records ranked as the prompt's recall ranks them (with the
        messages around the matches, memories too, and the messages nearest in meaning
        to ``text`` when an embedding model is configured). ``context=False``: matches
        only, without their neighbouring messages."""
        return await ranked(
            self.index, user_id, terms, limit, meaning=self.meaning, text=text, context=context
        )

    @staticmethod
    def listing(hits: list[SearchHit], terms: list[str]) -> str:
        """Hits as the chat lists them, one per line."""
        return format_hits(hits, terms)


__all__ = ["KINDS", "SearchFilter", "SearchService", "parse_kinds", "parse_since"]

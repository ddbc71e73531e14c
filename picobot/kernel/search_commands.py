"""``/search words``: the caller's own keyword recall, in every channel."""

from __future__ import annotations

from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter
from picobot.kernel.keywords import extract_terms
from picobot.messages import Outbound, notice
from picobot.store.search import SearchIndex
from picobot.tools.memory_search import format_hits, ranked

SEARCH_LIMIT = 10
"""Hits shown by /search."""


class SearchCommands:
    """/search over the caller's past messages and memories (never anyone else's)."""

    def __init__(self, index: SearchIndex, *, max_terms: int) -> None:
        self._index = index
        self._max_terms = max_terms

    def register(self, router: CommandRouter) -> None:
        """Add /search to a router."""
        router.add("search", "/search WORDS", "search your past messages and memories", self.search)

    async def search(self, call: CommandCall) -> list[Outbound]:
        """Hits for the words in the argument, best first."""
        if not call.args:
            raise UserError("Usage: /search WORDS (names, places or topics to look for).")
        terms = extract_terms(call.args, self._max_terms)
        if not terms:
            raise UserError("Those words are too common to search for; try more specific ones.")
        # Matches only: the messages around a match help the model's recall, but listed
        # here as "matches" they were results that do not contain the words at all.
        hits = await ranked(self._index, call.identity.user_id, terms, SEARCH_LIMIT, context=False)
        if not hits:
            return [notice(f"No matches for: {' '.join(terms)}", call.session_id)]
        return [
            notice(f"Matches for: {' '.join(terms)}\n{format_hits(hits, terms)}", call.session_id)
        ]

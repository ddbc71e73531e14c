"""``/search words``: the caller's own keyword recall, in every channel."""

from __future__ import annotations

from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter
from picobot.messages import Outbound, notice
from picobot.services.search import SearchService

SEARCH_LIMIT = 10
"""Hits shown by /search."""


class SearchCommands:
    """/search over the caller's past messages and memories (never anyone else's)."""

    def __init__(self, search: SearchService) -> None:
        self._search = search

    def register(self, router: CommandRouter) -> None:
        """Add /search to a router."""
        router.add("search", "/search WORDS", "search your past messages and memories", self.search)

    async def search(self, call: CommandCall) -> list[Outbound]:
        """Hits for the words in the argument, best first."""
        if not call.args:
            raise UserError("Usage: /search WORDS (names, places or topics to look for).")
        terms = self._search.terms(call.args)
        if not terms:
            raise UserError("Those words are too common to search for; try more specific ones.")
        # Matches only: the messages around a match help the model's recall, but listed
        # here as "matches" they were results that do not contain the words at all.
        hits = await self._search.ranked(
            call.identity.user_id, terms, SEARCH_LIMIT, text=call.args, context=False
        )
        if not hits:
            return [notice(f"No matches for: {' '.join(terms)}", call.session_id)]
        return [
            notice(
                f"Matches for: {' '.join(terms)}\n{self._search.listing(hits, terms)}",
                call.session_id,
            )
        ]

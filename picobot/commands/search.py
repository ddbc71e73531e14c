"""``/search [type:K] [session:ID] [since:T] words``: the caller's own keyword search,
in every channel.

Without a filter: the messages and notes ranked as recall ranks them, then the
learned facts and reflections that match. With one, the records of the asked kinds
(``type:messages,notes,facts,reflections``), of one session (``session:ID``: its
messages and reflections) or from a time on (``since:7d``, ``since:2024-05-01``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter
from picobot.messages import Outbound, notice
from picobot.services.search import SearchFilter, SearchService, parse_kinds, parse_since

SEARCH_LIMIT = 10
"""Hits shown by /search."""
USAGE = (
    "Usage: /search WORDS (names, places or topics to look for); filters before the words:"
    " type:messages,notes,facts,reflections session:ID since:7d (or since:2024-05-01)."
)


class SearchCommands:
    """/search over the caller's past messages and memories (never anyone else's)."""

    def __init__(self, search: SearchService, clock: Callable[[], float] = time.time) -> None:
        self._search = search
        self._clock = clock

    def register(self, router: CommandRouter) -> None:
        """Add /search to a router."""
        router.add(
            "search",
            "/search WORDS | /search type:K session:ID since:7d WORDS",
            "search your messages, notes, learned facts and reflections",
            self.search,
        )

    async def search(self, call: CommandCall) -> list[Outbound]:
        """Hits for the words in the argument, best first."""
        flt, words = self._filter(call)
        if not words:
            raise UserError(USAGE)
        terms = self._search.terms(words)
        if not terms:
            raise UserError("Those words are too common to search for; try more specific ones.")
        user = call.identity.user_id
        if flt is not None:
            hits = await self._search.filtered(user, terms, SEARCH_LIMIT, flt)
        else:
            # Matches only: the messages around a match help the model's recall, but
            # listed here as "matches" they were results that do not contain the words.
            hits = await self._search.ranked(user, terms, SEARCH_LIMIT, text=words, context=False)
            learned = SearchFilter(frozenset({"facts", "reflections"}))
            hits += await self._search.filtered(user, terms, SEARCH_LIMIT - len(hits), learned)
        if not hits:
            return [notice(f"No matches for: {' '.join(terms)}", call.session_id)]
        return [
            notice(
                f"Matches for: {' '.join(terms)}\n{self._search.listing(hits, terms)}",
                call.session_id,
            )
        ]

    def _filter(self, call: CommandCall) -> tuple[SearchFilter | None, str]:
        """The filters leading the argument (None: none given) and the words after them."""
        words = call.args.split()
        found: dict[str, str] = {}
        while words and words[0].partition(":")[0].lower() in ("type", "session", "since"):
            name, _, value = words.pop(0).partition(":")
            if not value:
                raise UserError(USAGE)
            found[name.lower()] = value
        if not found:
            return None, call.args.strip()
        flt = SearchFilter(
            parse_kinds(found["type"]) if "type" in found else SearchFilter().kinds,
            found.get("session"),
            parse_since(found["since"], self._clock()) if "since" in found else None,
        )
        return flt, " ".join(words)

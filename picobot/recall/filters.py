"""Search filters: which kinds of records, which session, from which time on.

Shared by ``/search``, the ``memory_search`` tool and the admin search, so the three
read ``type``, ``session`` and ``since`` the same way.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from picobot.errors import UserError
from picobot.store.conversation.branches import NOTHING_HIDDEN, Hidden
from picobot.store.retrieval.search import SearchHit, SearchIndex, SearchQuery

KINDS = ("messages", "notes", "facts", "reflections")
"""What a search may be limited to (``type``); reflections include their digests."""
_AGE = re.compile(r"(\d{1,6})([dhw])")
_AGE_SECS = {"h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Which records a search considers: kinds, one session, a time from which on."""

    kinds: frozenset[str] = field(default_factory=lambda: frozenset(KINDS))
    session_id: str | None = None
    since: float | None = None


def parse_kinds(text: str) -> frozenset[str]:
    """``messages,facts`` -> the kinds; singular forms and ``notes``/``memories`` too;
    UserError naming the known ones for anything else."""
    aliases = {"message": "messages", "note": "notes", "memory": "notes", "memories": "notes",
               "fact": "facts", "reflection": "reflections", "digest": "reflections",
               "digests": "reflections"}  # fmt: skip
    kinds = set()
    for word in (w.strip().lower() for w in text.split(",")):
        kind = aliases.get(word, word)
        if kind not in KINDS:
            raise UserError(f"Unknown type {word!r}: use {', '.join(KINDS)} (comma-separated).")
        kinds.add(kind)
    return frozenset(kinds)


def parse_since(text: str, now: float) -> float:
    """``7d``, ``12h``, ``2w`` (ago) or a date/time ``2024-05-01[T09:00[:00]][+00:00]``
    (UTC unless it says otherwise) -> epoch seconds; UserError for anything else."""
    text = text.strip()
    age = _AGE.fullmatch(text.lower())
    if age is not None:
        return now - int(age.group(1)) * _AGE_SECS[age.group(2)]
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UserError(
            f"Cannot read since {text!r}: use 7d, 12h, 2w or a date like 2024-05-01."
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


async def filtered_search(
    index: SearchIndex,
    user_id: str,
    terms: Sequence[str],
    limit: int,
    flt: SearchFilter,
    hidden: Hidden = NOTHING_HIDDEN,
) -> list[SearchHit]:
    """``user_id``'s records of the kinds, session and time of ``flt`` matching any of
    ``terms``, best match first (matches only, no neighbouring messages), none of
    ``hidden`` (what an edit branch leaves out of its prompt)."""
    if not terms or not flt.kinds or limit <= 0:
        return []
    query = SearchQuery(
        user_id,
        terms,
        limit,
        include_messages="messages" in flt.kinds,
        include_memories="notes" in flt.kinds,
        include_facts="facts" in flt.kinds,
        include_digests="reflections" in flt.kinds,
        in_session=flt.session_id,
        since=flt.since,
        exclude_ids=sorted(hidden.message_ids),
    )
    return [h for h in await index.filtered(query) if not hidden.hides(h.kind, h.row_id)]

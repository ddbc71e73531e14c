"""The ``memory_search`` tool: keyword recall over the caller's own records.

The owner is always ``ctx.user_id`` (the authenticated caller); the tool has no user
argument and refuses unknown ones. :func:`format_hits` is shared with ``/search``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

from picobot.access.context import Action, Scope, ToolContext
from picobot.errors import UserError
from picobot.llm.base import ToolSpec
from picobot.recall.filters import SearchFilter, filtered_search, parse_kinds, parse_since
from picobot.recall.meaning import VectorRecall
from picobot.store.conversation.branches import NOTHING_HIDDEN, Hidden, hidden_from
from picobot.store.retrieval.recall import RecallQuery, recall_records
from picobot.store.retrieval.search import MAX_LIMIT, SearchHit, SearchIndex
from picobot.tools.base import Arguments, argument_schema, parse_arguments

SNIPPET_CHARS = 300
"""Longest text shown per hit (a listing goes into a prompt or a chat)."""

MAX_TOP_K = 20


def _clamp(top_k: int) -> int:
    # A model asking for 500 hits gets the most there are rather than an error turn.
    return max(1, min(top_k, MAX_TOP_K))


class SearchArguments(Arguments):
    """The ``memory_search`` tool's arguments; whose records is never one of them."""

    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        description="Keywords to look for: names, places, topics."
    )
    top_k: Annotated[int, AfterValidator(_clamp)] = Field(
        5,
        description="How many matches to return.",
        json_schema_extra={"minimum": 1, "maximum": MAX_TOP_K},
    )
    type: str | None = Field(
        None,
        description="Only these kinds, comma-separated: messages, notes, facts, reflections.",
    )
    session: str | None = Field(None, description="Only this session's records.")
    since: str | None = Field(
        None, description="Only records from this time on: 7d, 12h, 2w or a date (2024-05-01)."
    )


_PARAMETERS = argument_schema(SearchArguments)


def snippet(text: str, terms: Sequence[str] = (), width: int = SNIPPET_CHARS) -> str:
    """``text`` on one line, cut to ``width`` chars around the first matching term."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    found = [i for i in (lowered.find(t.lower()) for t in terms if t) if i >= 0]
    # Start a little before the match so the reader sees what led up to it.
    start = max(0, min(found, default=0) - width // 4)
    start = min(start, len(flat) - (width - 1))
    head = "…" if start > 0 else ""
    body_width = width - len(head)
    body = flat[start : start + body_width]
    if start + body_width < len(flat):
        body = body[:-1] + "…"
    return head + body


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def format_hits(hits: Sequence[SearchHit], terms: Sequence[str] = ()) -> str:
    """A compact listing of hits, one per line: kind, when, session, snippet."""
    if not hits:
        return "no matches"
    lines = []
    for n, hit in enumerate(hits, start=1):
        where = "saved"
        if hit.kind == "message":  # the message number is what /pin message N takes
            where = f"session {hit.session_id} #{hit.seq_order}, message {hit.row_id}"
        elif hit.kind == "reflection" and hit.session_id:
            where = f"session {hit.session_id}"
        elif hit.kind == "fact":
            where = f"learned, fact {hit.row_id}"
        lines.append(
            f"{n}. [{hit.kind}] {_when(hit.created_at)} {where}: {snippet(hit.text, terms)}"
        )
    return "\n".join(lines)


async def ranked(
    index: SearchIndex,
    user_id: str,
    terms: Sequence[str],
    limit: int,
    *,
    meaning: VectorRecall | None = None,
    text: str = "",
    context: bool = True,
    hidden: Hidden = NOTHING_HIDDEN,
) -> list[SearchHit]:
    """The best ``limit`` records for ``terms``, ranked as the prompt's recall ranks them:
    matches with the messages around them (:mod:`picobot.store.retrieval.recall`), memories too,
    fused with the messages nearest in meaning to ``text`` when ``meaning`` is given.

    ``context=False`` leaves the neighbours out: only records that match the terms, for
    a listing that calls them matches (``/search``). Nothing of ``hidden`` is returned."""
    limit = max(1, min(limit, MAX_LIMIT))
    query = RecallQuery(
        user_id,
        terms,
        candidates=limit,
        context_hits=limit if context else 0,
        include_memories=True,
        exclude_ids=sorted(hidden.message_ids),
        exclude_layers=hidden.layer_ids,
    )
    vectors = await meaning.query(text or " ".join(terms)) if meaning is not None else None
    read = functools.partial(recall_records, query=query, vectors=vectors)
    return (await index.read_fresh(read))[:limit]


class MemorySearchTool:
    """Lets the model search the caller's past messages and saved memories by keywords."""

    def __init__(
        self,
        index: SearchIndex,
        *,
        terms: Callable[[str], list[str]],
        meaning: VectorRecall | None = None,
    ) -> None:
        """``terms`` turns a query into search terms (the runtime passes the keyword
        extraction recall and /search use); ``meaning`` fuses recall by meaning."""
        self._index = index
        self._terms = terms
        self._meaning = meaning

    @property
    def spec(self) -> ToolSpec:
        """Name, description and parameters for the model."""
        return ToolSpec(
            name="memory_search",
            description=(
                "Search the user's earlier conversations (all their sessions) and saved "
                "memories by keywords. Use it when the user refers to something said "
                "before that is not in the conversation above. Returns the best matches. "
                "Optional filters: type (messages, notes, facts, reflections), session, since."
            ),
            parameters=_PARAMETERS,
        )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        """Search ``ctx.user_id``'s records; UserError for bad arguments."""
        parsed = parse_arguments(SearchArguments, args)
        # Other sessions of the same user are User scope, auto-granted for own data.
        ctx.require(Action.MEMORY_READ, Scope.USER)
        terms = self._terms(parsed.query)
        if not terms:
            raise UserError(
                "The query has no searchable words (only very common ones); "
                "use names, places or topics."
            )
        # An edit branch's search leaves out what the edit replaced, as its prompt does.
        hidden = NOTHING_HIDDEN
        if ctx.session_id is not None:
            sid = ctx.session_id
            hidden = await self._index.read_fresh(lambda conn: hidden_from(conn, sid))
        if parsed.type is None and parsed.session is None and parsed.since is None:
            hits = await ranked(
                self._index,
                ctx.user_id,
                terms,
                parsed.top_k,
                meaning=self._meaning,
                text=parsed.query,
                hidden=hidden,
            )
        else:
            flt = SearchFilter(
                parse_kinds(parsed.type) if parsed.type is not None else SearchFilter().kinds,
                parsed.session,
                None if parsed.since is None else parse_since(parsed.since, time.time()),
            )
            hits = await filtered_search(self._index, ctx.user_id, terms, parsed.top_k, flt, hidden)
        return format_hits(hits, terms)

"""The MCP server: PicoBot's memory tools and resources for one way of knowing the caller.

:func:`build_server` registers the tools and resources on an ``MCPServer`` of the SDK;
``who`` names the authenticated user of a request (the configured local user on stdio,
the API key's user over HTTP: :mod:`picobot.mcp.http`). No tool has a user or scope
argument, so what a client sends can never name another user's data.

Offered: ``search_memory``, ``remember``, ``list_notes``, ``list_facts`` and ``forget``
(two steps: a plan and a single-use token, then the token). Not offered: purges. A
purge deletes whole sessions or a whole user's data, and an MCP client is a model acting
for the user, which could confirm its own request; purges stay in the chat and the CLI.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from picobot import __version__
from picobot.access.context import ToolContext
from picobot.mcp.access import MemoryAccess
from picobot.store.conversation.memories import KEY_PATTERN, MAX_KEY_CHARS
from picobot.tools.memory_search import MAX_TOP_K

Who = Callable[[Context], str | None]
"""The authenticated user id of a request, or None (then the call is refused)."""

NOTES_URI = "picobot://notes{?limit}"
FACTS_URI = "picobot://facts{?limit}"
"""Templates, not static resources: only a template's reader gets the request (and so
the caller); ``picobot://notes`` itself matches, the query being optional."""
DEFAULT_LIMIT = 50
INSTRUCTIONS = (
    "PicoBot's memory of this user: their past conversations, the notes they asked to keep "
    "and the facts PicoBot learned. search_memory finds what was said before; remember "
    "keeps a note. forget asks for a confirmation first: show the user the plan and call "
    "it again with the token only if they agree."
)

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_FORGET = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


def build_server(access: MemoryAccess, who: Who) -> MCPServer:
    """An MCPServer whose tools act for ``who(ctx)`` only, through ``access``."""
    # The SDK logs a failed call's message at INFO, and ours can name a note key (user
    # data); its warnings and errors still show.
    logging.getLogger("mcp").setLevel(logging.WARNING)
    server: MCPServer = MCPServer(
        "picobot-memory", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    def caller(ctx: Context) -> ToolContext:
        user_id = who(ctx)
        if user_id is None:
            raise ToolError("Not authenticated.")
        return access.context(user_id)

    async def run(ctx: Context, name: str, op: Callable[[ToolContext], Awaitable[str]]) -> str:
        tool_ctx = caller(ctx)
        outcome = await access.call(tool_ctx, name, lambda: op(tool_ctx))
        if not outcome.ok:
            raise ToolError(outcome.text)
        return outcome.text

    async def read(ctx: Context, name: str, op: Callable[[ToolContext], Awaitable[str]]) -> str:
        try:
            return await run(ctx, name, op)
        except ToolError as exc:
            raise ResourceError(str(exc)) from None

    @server.tool(annotations=_READ)
    async def search_memory(
        query: Annotated[str, Field(description="Keywords to look for: names, places, topics.")],
        ctx: Context,
        top_k: Annotated[
            int, Field(description="How many matches to return.", ge=1, le=MAX_TOP_K)
        ] = 5,
    ) -> str:
        """Search the user's earlier conversations (all their sessions) and saved notes by
        keywords, ranked as PicoBot's own recall ranks them. Returns the best matches."""
        return await run(ctx, "search_memory", lambda c: access.search(c, query, top_k))

    @server.tool(annotations=_WRITE)
    async def remember(
        key: Annotated[
            str,
            Field(
                description="Note name: lowercase letters, digits, underscores.",
                pattern=KEY_PATTERN,
                max_length=MAX_KEY_CHARS,
            ),
        ],
        content: Annotated[str, Field(description="What to remember.")],
        ctx: Context,
    ) -> str:
        """Keep a note about the user under key (e.g. key 'pet', content 'a cat named Tom');
        a note with the same key is replaced. PicoBot shows notes to its model every turn."""
        return await run(ctx, "remember", lambda c: access.remember(c, key, content))

    @server.tool(annotations=_READ)
    async def list_notes(ctx: Context) -> str:
        """List the user's notes, newest first."""
        return await run(ctx, "list_notes", access.notes)

    @server.tool(annotations=_READ)
    async def list_facts(ctx: Context) -> str:
        """List what PicoBot learned about the user, with confidence and fact numbers."""
        return await run(ctx, "list_facts", access.facts)

    @server.tool(annotations=_FORGET)
    async def forget(
        ctx: Context,
        note: Annotated[str | None, Field(description="Key of a note to delete.")] = None,
        fact: Annotated[int | None, Field(description="Number of a learned fact.")] = None,
        confirmation: Annotated[
            str | None, Field(description="The token a first forget call returned.")
        ] = None,
    ) -> str:
        """Delete one note or one learned fact, in two steps. Called with note or fact, it
        deletes nothing and returns what would go plus a confirmation token; ask the user,
        and only if they agree call forget again with confirmation set to that token
        (single use, expires)."""
        if confirmation is not None:
            return await run(ctx, "forget", lambda c: access.confirm_forget(c, confirmation))
        return await run(ctx, "forget", lambda c: access.plan_forget(c, note, fact))

    @server.resource(NOTES_URI, name="notes", mime_type="text/plain")
    async def notes_resource(ctx: Context, limit: int = DEFAULT_LIMIT) -> str:
        """The user's notes, newest first (at most ``limit``)."""
        return await read(ctx, "read:notes", lambda c: access.notes(c, limit))

    @server.resource(FACTS_URI, name="facts", mime_type="text/plain")
    async def facts_resource(ctx: Context, limit: int = DEFAULT_LIMIT) -> str:
        """What PicoBot learned about the user, most confident first (at most ``limit``)."""
        return await read(ctx, "read:facts", lambda c: access.facts(c, limit))

    return server

"""/remember, /memories, /forget: the user's own memories from any channel.

The commands are a front end over :class:`picobot.services.notes.NoteService`, the
same rules and repository the model's ``memory`` tool uses. They act only on the
memories of the authenticated caller (``call.identity.user_id``).
"""

from __future__ import annotations

from picobot.access.context import ToolContext
from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter
from picobot.messages import Outbound, notice
from picobot.services.notes import NoteService

REMEMBER_USAGE = (
    "Usage: /remember key: content (e.g. /remember pet: a cat named Tom);"
    " /remember --sensitive key: content keeps it out of recall and the prompt."
)
SENSITIVE_FLAG = "--sensitive"
FORGET_USAGE = "Usage: /forget key (see /memories for your keys)."


class MemoryCommands:
    """The memory slash commands, scoped to the caller's own memories."""

    def __init__(self, service: NoteService) -> None:
        """Front end over ``service``, shared with the ``memory`` tool (one set of rules)."""
        self.service = service

    def register(self, router: CommandRouter) -> None:
        """Add /remember, /memories and /forget to a router."""
        router.add(
            "remember",
            "/remember key: content | /remember --sensitive key: content",
            "save a memory (a sensitive one is kept out of recall and the prompt)",
            self.remember,
        )
        router.add("memories", "/memories", "list your memories", self.memories)
        router.add("forget", "/forget key", "delete one of your memories", self.forget)

    @staticmethod
    def _context(call: CommandCall) -> ToolContext:
        # Commands carry no grants of their own: the caller's own-data grants only.
        ident = call.identity
        return ToolContext(user_id=ident.user_id, session_id=call.session_id, channel=ident.channel)

    async def remember(self, call: CommandCall) -> list[Outbound]:
        """Save or update ``key: content`` (``--sensitive`` first: marked sensitive)."""
        args = call.args
        flag, _, rest = args.partition(" ")
        sensitive = flag.lower() == SENSITIVE_FLAG
        if sensitive:
            args = rest.strip()
        key, sep, content = args.partition(":")
        if not sep or not key.strip():
            raise UserError(REMEMBER_USAGE)
        memory, created = await self.service.save(
            self._context(call), key, content, sensitive=True if sensitive else None
        )
        text = self.service.saved_text(memory, created)
        if memory.sensitive:
            text += " It is marked sensitive: kept out of recall and the prompt."
        return [notice(text, call.session_id)]

    async def memories(self, call: CommandCall) -> list[Outbound]:
        """List the caller's memories, newest first."""
        found = await self.service.list(self._context(call), sensitive=True)
        text = self.service.listing_text(found)
        if not found:
            text += " Save one with /remember key: content."
        return [notice(text, call.session_id)]

    async def forget(self, call: CommandCall) -> list[Outbound]:
        """Delete one of the caller's memories."""
        if not call.args:
            raise UserError(FORGET_USAGE)
        gone = await self.service.delete(self._context(call), call.args)
        return [notice(f"Forgot memory {gone.key!r}.", call.session_id)]

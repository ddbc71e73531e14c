"""The ``memory`` tool: the model's front end over the memory notes.

The rules (permissions, key and content, the per-user cap) are the notes service's
(:mod:`picobot.services.notes`), shared with the /remember commands. The owner of the
memories is always taken from the :class:`ToolContext` (the authenticated caller),
never from tool arguments: the tool has no user id argument and refuses unknown ones.
"""

from __future__ import annotations

import builtins
from typing import Any, Literal, Protocol

from pydantic import Field

from picobot.access.context import Scope, ToolContext
from picobot.errors import UserError
from picobot.llm.base import ToolSpec
from picobot.store.conversation.memories import KEY_PATTERN, MAX_KEY_CHARS, Memory
from picobot.tools.base import Arguments, argument_schema, parse_arguments


class Notes(Protocol):
    """The memory-notes operations the tool needs: the runtime hands it the services'
    :class:`~picobot.services.notes.NoteService` (one set of rules for the tool, the
    /remember commands, the admin API and the CLI)."""

    @property
    def max_chars(self) -> int:
        """Longest content a memory may have."""

    async def save(
        self, ctx: ToolContext, key: str, content: str, scope: Scope = ..., *, in_turn: bool = ...
    ) -> tuple[Memory, bool]:
        """Save or update a memory; return it and whether it is new."""

    async def list(self, ctx: ToolContext, scope: Scope = ...) -> builtins.list[Memory]:
        """The memories at ``scope``, newest first."""

    async def delete(self, ctx: ToolContext, key: str, scope: Scope = ...) -> Memory:
        """Delete a memory; return what was deleted."""

    def saved_text(self, memory: Memory, created: bool, scope: Scope = ...) -> str:
        """One line confirming a save."""

    def listing_text(self, memories: builtins.list[Memory], scope: Scope = ...) -> str:
        """A listing, one memory per line."""


_SCOPES = {"user": Scope.USER, "global": Scope.GLOBAL}


class MemoryArguments(Arguments):
    """The ``memory`` tool's arguments; the owner is never one of them."""

    action: Literal["save", "list", "delete"] = Field(description="What to do.")
    # The key rule is checked by validate_key (its messages name the broken rule);
    # the schema states it so that the model gets it right the first time.
    key: str | None = Field(
        None,
        description="Memory name: lowercase letters, digits, underscores "
        "(needed for save and delete).",
        json_schema_extra={"pattern": KEY_PATTERN, "maxLength": MAX_KEY_CHARS},
    )
    content: str | None = Field(None, description="What to remember (needed for save).")
    scope: Literal["user", "global"] = Field(
        "user", description="user: this user's memories; global: shared ones."
    )


def _required(value: str | None, name: str) -> str:
    if value is None:
        raise UserError(f"missing argument {name!r}")
    return value


class MemoryTool:
    """The ``memory`` tool: save, list or delete the caller's (or shared) memories."""

    def __init__(self, service: Notes) -> None:
        """Front end over ``service``, shared with the /remember commands (one set of rules)."""
        self.service = service
        self._spec = ToolSpec(
            name="memory",
            description=(
                "Keep long-term memories about the user: short facts they want remembered "
                "across conversations (e.g. key 'pet', content 'a cat named Tom'). "
                "action=save stores or replaces the memory under key; action=list shows "
                "them; action=delete removes one. scope=global means memories shared by "
                "all users and only works with an operator grant."
            ),
            parameters=_parameters(service.max_chars),
        )

    @property
    def spec(self) -> ToolSpec:
        """Name ``memory``, its description and JSON-schema parameters."""
        return self._spec

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        """Do one memory action for ``ctx.user_id``; UserError for bad arguments or denial."""
        parsed = parse_arguments(MemoryArguments, args)
        scope = _SCOPES[parsed.scope]
        service = self.service
        if parsed.action == "list":
            return service.listing_text(await service.list(ctx, scope), scope)
        key = _required(parsed.key, "key")
        if parsed.action == "delete":
            gone = await service.delete(ctx, key, scope)
            return f"Deleted memory {gone.key!r}."
        content = _required(parsed.content, "content")
        memory, created = await service.save(ctx, key, content, scope, in_turn=True)
        return service.saved_text(memory, created, scope)


def _parameters(max_chars: int) -> dict[str, Any]:
    schema = argument_schema(MemoryArguments)
    # The content limit is a setting, so it joins the schema per instance.
    schema["properties"]["content"]["maxLength"] = max_chars
    return schema

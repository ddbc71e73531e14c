"""The memory tool, and the service it shares with the /remember commands.

:class:`MemoryService` is the one place where permissions, key and content rules and
the per-user cap meet the repository; the model's ``memory`` tool and the slash
commands are thin front ends over it. The owner of the memories is always taken from
the :class:`ToolContext` (the authenticated caller), never from tool arguments: the
tool has no user id argument and refuses unknown ones.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from picobot.errors import AccessDenied, UserError
from picobot.kernel.context import Action, Scope, ToolContext
from picobot.llm.base import ToolSpec
from picobot.store.memories import (
    GLOBAL_USER,
    KEY_PATTERN,
    MAX_KEY_CHARS,
    Memory,
    MemoryRepo,
    validate_content,
    validate_key,
)
from picobot.tools.base import Arguments, argument_schema, parse_arguments

PREVIEW_CHARS = 200
"""Longest content shown per memory in a listing (a listing goes into a prompt or chat)."""

_SCOPES = {"user": Scope.USER, "global": Scope.GLOBAL}


class MemoryService:
    """Permission-checked, validated memory operations on behalf of a ToolContext."""

    def __init__(
        self,
        repo: MemoryRepo,
        *,
        max_count: int,
        max_chars: int,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.repo = repo
        self.max_count = max_count
        self.max_chars = max_chars
        self.redact: Callable[[str], str] = redact or str

    def owner(self, ctx: ToolContext, action: Action, scope: Scope) -> str:
        """Check ``ctx`` may do ``action`` at ``scope``; return whose memories that means.

        User scope is the caller's own memories; Global scope is the shared store.
        """
        if scope == Scope.USER and ctx.user_id == GLOBAL_USER:
            # The reserved owner must not be reachable through "own data" grants.
            raise AccessDenied("Permission denied: reserved user id.")
        if scope not in (Scope.USER, Scope.GLOBAL):
            raise UserError(f"Memories are kept per user or globally, not per {scope.name}.")
        ctx.require(action, scope)
        return GLOBAL_USER if scope == Scope.GLOBAL else ctx.user_id

    async def save(
        self,
        ctx: ToolContext,
        key: str,
        content: str,
        scope: Scope = Scope.USER,
        *,
        in_turn: bool = False,
    ) -> tuple[Memory, bool]:
        """Save or update a memory; return it and whether it is new.

        ``in_turn``: the model's save, kept only while the turn's session exists (a
        purge of it or its user meanwhile raises SessionGone; see MemoryRepo.save).
        """
        owner = self.owner(ctx, Action.MEMORY_WRITE, scope)
        key = validate_key(key)
        # Secrets never reach the store, the index or a prompt.
        content = self.redact(validate_content(content, self.max_chars))
        existed = await self.repo.get(owner, key) is not None
        bound = ctx.session_id if in_turn else None
        memory = await self.repo.save(
            owner, key, content, max_count=self.max_count, session_id=bound
        )
        return memory, not existed

    async def list(self, ctx: ToolContext, scope: Scope = Scope.USER) -> builtins.list[Memory]:
        """The memories at ``scope``, newest first."""
        owner = self.owner(ctx, Action.MEMORY_READ, scope)
        return await self.repo.list(owner, limit=max(self.max_count, 0))

    async def delete(self, ctx: ToolContext, key: str, scope: Scope = Scope.USER) -> Memory:
        """Delete a memory; return what was deleted. UserError if there was none."""
        owner = self.owner(ctx, Action.MEMORY_WRITE, scope)
        key = validate_key(key)
        memory = await self.repo.get(owner, key)
        if memory is None or not await self.repo.delete(owner, key):
            where = "shared memory" if scope == Scope.GLOBAL else "memory"
            raise UserError(f"There is no {where} {key!r} to forget.")
        return memory

    def saved_text(self, memory: Memory, created: bool, scope: Scope = Scope.USER) -> str:
        """One line confirming a save."""
        verb = "Saved" if created else "Updated"
        where = "shared memory" if scope == Scope.GLOBAL else "memory"
        return f"{verb} {where} {memory.key!r}."

    def listing_text(self, memories: builtins.list[Memory], scope: Scope = Scope.USER) -> str:
        """A listing, one memory per line, long contents shortened."""
        where = "shared memories" if scope == Scope.GLOBAL else "memories"
        if not memories:
            return f"No {where} saved yet."
        head = f"{where.capitalize()} ({len(memories)} of {self.max_count}), newest first:"
        return "\n".join([head, *(f"- {m.key}: {preview(m.content)}" for m in memories)])


def preview(content: str, limit: int = PREVIEW_CHARS) -> str:
    """Content on one line, cut to ``limit`` characters with a visible marker."""
    flat = " ".join(content.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


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

    def __init__(self, service: MemoryService) -> None:
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

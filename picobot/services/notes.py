"""Memory notes: what a user (or an operator) asks PicoBot to remember, by key.

:class:`NoteService` is the one place where permissions, the key and content rules and
the per-user cap meet the repository. The model's ``memory`` tool and the
``/remember`` commands act for a :class:`ToolContext` (the authenticated caller; the
owner is never taken from arguments); the admin API and the CLI act for an operator on
a named user. The store redacts what it writes (:attr:`Database.redact`), so no caller
redacts.
"""

from __future__ import annotations

import builtins

from picobot.access.context import Action, Scope, ToolContext
from picobot.errors import AccessDenied, UserError
from picobot.store.conversation.memories import (
    GLOBAL_USER,
    Memory,
    MemoryRepo,
    validate_content,
    validate_key,
)

PREVIEW_CHARS = 200
"""Longest content shown per memory in a listing (a listing goes into a prompt or chat)."""


def preview(content: str, limit: int = PREVIEW_CHARS) -> str:
    """Content on one line, cut to ``limit`` characters with a visible marker."""
    flat = " ".join(content.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


class NoteService:
    """Validated memory operations: for a ToolContext (chat, tool) or an operator."""

    def __init__(
        self, repo: MemoryRepo, *, max_count: int, max_chars: int, enabled: bool = True
    ) -> None:
        self.repo = repo
        self.max_count = max_count
        self.max_chars = max_chars
        self.enabled = enabled
        """Whether user memories are switched on (``enable_user_memories``)."""

    # --- for the caller of a turn or a command --------------------------------------

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
        sensitive: bool | None = None,
    ) -> tuple[Memory, bool]:
        """Save or update a memory; return it and whether it is new.

        ``in_turn``: the model's save, kept only while the turn's session exists (a
        purge of it or its user meanwhile raises SessionGone; see MemoryRepo.save).
        ``sensitive``: mark the note sensitive or not (None keeps its mark).
        """
        owner = self.owner(ctx, Action.MEMORY_WRITE, scope)
        key, content = self.validated(key, content)
        existed = await self.repo.get(owner, key) is not None
        bound = ctx.session_id if in_turn else None
        memory = await self.repo.save(
            owner, key, content, max_count=self.max_count, session_id=bound, sensitive=sensitive
        )
        return memory, not existed

    async def list(
        self, ctx: ToolContext, scope: Scope = Scope.USER, *, sensitive: bool = False
    ) -> builtins.list[Memory]:
        """The memories at ``scope``, newest first; the ones marked sensitive only with
        ``sensitive`` (the user's own listing, never the model's tool)."""
        owner = self.owner(ctx, Action.MEMORY_READ, scope)
        return await self.repo.list(owner, limit=max(self.max_count, 0), sensitive=sensitive)

    async def set_sensitive(self, ctx: ToolContext, key: str, sensitive: bool) -> Memory:
        """Mark one of the caller's own notes sensitive or not; UserError if there is none."""
        owner = self.owner(ctx, Action.MEMORY_WRITE, Scope.USER)
        memory = await self.repo.set_sensitive(owner, validate_key(key), sensitive)
        if memory is None:
            raise UserError(f"There is no memory {key.strip()!r}. /memories lists yours.")
        return memory

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
        lines = [
            f"- {m.key}{' (sensitive)' if m.sensitive else ''}: {preview(m.content)}"
            for m in memories
        ]
        return "\n".join([head, *lines])

    # --- for an operator, on a named user ----------------------------------------------

    def validated(self, key: str, content: str) -> tuple[str, str]:
        """The key and content as stored; UserError naming the broken rule."""
        return validate_key(key), validate_content(content, self.max_chars)

    async def get_of(self, user_id: str, key: str) -> Memory | None:
        """``user_id``'s memory ``key``, or None.

        Looked up as given (surrounding spaces aside), not checked against the key rule:
        an operator must be able to see and delete a row written before the rule."""
        return await self.repo.get(user_id, key.strip())

    async def all(self, user_id: str | None, limit: int) -> builtins.list[Memory]:
        """Memories of ``user_id`` (None: of every user), most recently updated first."""
        return await self.repo.all(user_id, limit)

    async def list_of(self, user_id: str) -> builtins.list[Memory]:
        """Every memory of ``user_id``, most recently updated first."""
        return await self.repo.list(user_id)

    async def put(self, user_id: str, key: str, content: str, *, actor: str) -> Memory:
        """Save ``user_id``'s memory ``key`` as ``actor`` (the per-user cap applies:
        UserError when it is reached)."""
        key, content = self.validated(key, content)
        return await self.repo.save(user_id, key, content, max_count=self.max_count, actor=actor)

    async def remove(self, user_id: str, key: str, *, actor: str, now: float | None = None) -> bool:
        """Delete ``user_id``'s memory ``key`` as ``actor``; False if there was none (the
        key is looked up as :meth:`get_of` does)."""
        return await self.repo.delete(user_id, key.strip(), actor=actor, now=now)

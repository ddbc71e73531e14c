"""Purge scopes dispatch from the registry: a new scope is its rules plus one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from picobot.errors import AccessDenied, ConfigError
from picobot.privacy.controller import PrivacyController
from picobot.privacy.scopes import (
    PURGE_SCOPES,
    SCOPE_TYPES,
    Actor,
    Counted,
    PurgeScope,
    ScopeDeps,
    SessionScope,
    rules_for,
)
from picobot.store.conversation.events import EventFilter, list_events
from picobot.store.db import Database
from picobot.store.erasure.purge import PurgeCounts

OPERATOR = Actor("cli:op", operator=True)


@dataclass(frozen=True, slots=True)
class NotesOf:
    """A made-up scope: a user's notes (counted as memories)."""

    user_id: str
    kind: ClassVar[str] = "notes_of"

    def describe(self) -> str:
        return f"the notes of {self.user_id}"


class NotesRules:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def allows(self, scope: PurgeScope, actor: Actor, deps: ScopeDeps) -> bool:
        assert isinstance(scope, NotesOf)
        return scope.user_id == actor.id

    async def count(self, scope: PurgeScope, deps: ScopeDeps) -> Counted:
        return Counted(PurgeCounts(memories=3))

    async def delete(self, scope: PurgeScope, cutoff: float | None, deps: ScopeDeps) -> PurgeCounts:
        assert isinstance(scope, NotesOf)
        self.deleted.append(scope.user_id)
        return PurgeCounts(memories=3)

    def owner(self, scope: PurgeScope) -> tuple[str | None, str | None]:
        assert isinstance(scope, NotesOf)
        return scope.user_id, None


async def test_a_registered_scope_is_planned_confirmed_and_recorded(db: Database) -> None:
    rules = NotesRules()
    with PURGE_SCOPES.added("notes_of", rules), SCOPE_TYPES.added("notes_of", NotesOf):
        controller = PrivacyController(db)
        with pytest.raises(AccessDenied):
            await controller.plan(NotesOf("alice"), Actor("bob"))
        pending = await controller.request(NotesOf("alice"), Actor("alice"))
        assert pending.plan.prompt().startswith("Permanently delete the notes of alice: ")
        result = await controller.confirm(pending.token, Actor("alice"), "yes")
    assert result is not None and result.counts.memories == 3
    assert rules.deleted == ["alice"]
    # The steps recorded against alice went with her data; the completion stays.
    events = await db.read(lambda c: list_events(c, EventFilter(), 10))
    assert [(e.type, e.payload["scope"]) for e in events] == [("purge.completed", "notes_of")]


def test_an_unknown_kind_names_the_known_ones() -> None:
    assert rules_for(SessionScope("s")) is PURGE_SCOPES.get("session")
    with pytest.raises(ConfigError, match="known: facts, messages, older_than, session, user"):
        rules_for(NotesOf("alice"))


async def test_an_operator_may_purge_any_kind(db: Database) -> None:
    with PURGE_SCOPES.added("notes_of", NotesRules()):
        plan = await PrivacyController(db).plan(NotesOf("alice"), OPERATOR)
    assert plan.counts.memories == 3

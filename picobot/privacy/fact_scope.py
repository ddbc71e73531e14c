"""The purge scope of chosen learned facts, and how an operator's choice becomes one.

An operator deletes facts in bulk (``POST /api/v1/purge`` with scope ``facts``,
``picobot facts delete``) through the same two-step :class:`PrivacyController`
exchange as any purge: the plan counts the facts and their owners, its token is bound
to the operator, single use and expiring, and the deleted text is erased from the
database files. The ids are resolved once, when the plan is made, so a confirmation
deletes exactly the facts it counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from picobot.errors import UserError
from picobot.privacy.scopes import PURGE_SCOPES, SCOPE_TYPES, Actor, Counted, PurgeScope, ScopeDeps
from picobot.store.db import Database
from picobot.store.erasure.purge import PurgeCounts
from picobot.store.learned.facts import FactFilter, find_facts

MAX_CHOSEN_FACTS = 100_000
"""Most facts one plan may hold: a larger choice is a mistake or a user purge."""


@dataclass(frozen=True, slots=True)
class FactsScope:
    """Exactly these learned facts, with their sources, history and index entries;
    ``users`` is how many users own them. Facts that match the same filter only after
    the plan was made are not part of it."""

    ids: tuple[int, ...] = field(repr=False)  # logged scopes stay one line
    users: int
    kind: ClassVar[str] = "facts"

    def describe(self) -> str:
        """Human words for the scope."""
        n = len(self.ids)
        if not n:
            return "the chosen learned facts (none matches)"
        owners = f"{self.users} user{'' if self.users == 1 else 's'}"
        return f"{n} chosen learned fact{'' if n == 1 else 's'} of {owners}"


async def choose_facts(db: Database, where: FactFilter) -> FactsScope:
    """The facts ``where`` matches now, as a scope; UserError if it names no criterion."""
    if where.names_nothing:
        raise UserError("Name the facts to delete: ids, or at least one filter.")
    found = await db.read(lambda c: find_facts(c, where, MAX_CHOSEN_FACTS + 1))
    if len(found) > MAX_CHOSEN_FACTS:
        raise UserError(
            f"More than {MAX_CHOSEN_FACTS} facts match; narrow the filter or purge the user."
        )
    return FactsScope(tuple(sorted(f.id for f in found)), len({f.user_id for f in found}))


class _FactsRules:
    async def allows(self, scope: PurgeScope, actor: Actor, deps: ScopeDeps) -> bool:
        return False  # chosen by an operator (a user deletes theirs with /forget fact N)

    async def count(self, scope: PurgeScope, deps: ScopeDeps) -> Counted:
        assert isinstance(scope, FactsScope)
        facts, entries = await deps.facts.count_ids(scope.ids)
        return Counted(PurgeCounts(facts=facts, index_entries=entries))

    async def delete(self, scope: PurgeScope, cutoff: float | None, deps: ScopeDeps) -> PurgeCounts:
        assert isinstance(scope, FactsScope)
        facts, entries = await deps.facts.delete_ids(scope.ids)
        return PurgeCounts(facts=facts, index_entries=entries)

    def owner(self, scope: PurgeScope) -> tuple[str | None, str | None]:
        return None, None


SCOPE_TYPES.add("facts", FactsScope)
PURGE_SCOPES.add("facts", _FactsRules())

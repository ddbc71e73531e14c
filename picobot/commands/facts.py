"""/facts, /forget fact N, /pin fact N, /unpin fact N, /pins, /reflect.

``/reflect`` also stores the session's reflection (:mod:`picobot.tasks.reflection`);
message pins wrap these commands (:mod:`picobot.commands.pins`).

The chat side of learned facts. Every command acts on the facts of the authenticated
caller (``call.identity.user_id``) only: a fact number of someone else is answered
like one that does not exist. ``/reflect`` runs extraction on the current session now
(a command, not a turn: it is the one place a chat message waits for extraction).
"""

from __future__ import annotations

from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter, Handler
from picobot.messages import Outbound, notice
from picobot.numbers import parse_digits
from picobot.services.facts import FactService
from picobot.store.learned.facts import Fact, FactFilter

MAX_LISTED = 50
"""Most facts one /facts or /pins answer lists."""


def fact_text(fact: Fact) -> str:
    """One fact as the chat and CLI list it: ``#12 (0.80) preference, tea: likes green tea``."""
    about = f", {fact.subject}" if fact.subject else ""
    flags = "".join([" [pinned]" if fact.pinned else "", "" if fact.active else " [inactive]"])
    return f"#{fact.id} ({fact.confidence:.2f}) {fact.category}{about}: {fact.text}{flags}"


def _fact_number(args: str, usage: str) -> int:
    word, _, number = args.partition(" ")
    number = number.strip().lstrip("#")
    fact_id = parse_digits(number)
    if word.lower() != "fact" or fact_id is None:
        raise UserError(usage)
    return fact_id


class FactCommands:
    """The learned-facts slash commands, scoped to the caller's own facts."""

    def __init__(self, facts: FactService) -> None:
        self._facts = facts
        self._forget_memory: Handler | None = None

    def register(self, router: CommandRouter) -> None:
        """Add the commands; ``/forget`` keeps forgetting memories by key."""
        previous = router.get("forget")
        self._forget_memory = previous.handler if previous is not None else None
        router.add("facts", "/facts", "list what I have learned about you", self.facts)
        router.add("pins", "/pins", "list your pinned facts", self.pins)
        router.add("pin", "/pin fact N", "keep a learned fact from fading", self.pin)
        router.add("unpin", "/unpin fact N", "let a pinned fact fade again", self.unpin)
        router.add("reflect", "/reflect", "learn from this conversation now", self.reflect)
        usage = "/forget key | /forget fact N" if previous else "/forget fact N"
        router.add("forget", usage, "delete a memory or a learned fact", self.forget)

    async def _list(
        self, call: CommandCall, where: FactFilter, empty: str, title: str
    ) -> list[Outbound]:
        found = await self._facts.find(where, MAX_LISTED + 1)
        if not found:
            return [notice(empty, call.session_id)]
        lines = [fact_text(f) for f in found[:MAX_LISTED]]
        if len(found) > MAX_LISTED:
            lines.append(f"(the first {MAX_LISTED}; the rest are less certain)")
        return [notice(title + "\n" + "\n".join(lines), call.session_id)]

    async def facts(self, call: CommandCall) -> list[Outbound]:
        """List the caller's facts, most confident first, with their confidence."""
        return await self._list(
            call,
            FactFilter(user_id=call.identity.user_id),
            "I have not learned any facts about you yet. /reflect learns from this chat now.",
            "What I have learned (confidence 0-1; /forget fact N deletes one):",
        )

    async def pins(self, call: CommandCall) -> list[Outbound]:
        """List the caller's pinned facts."""
        where = FactFilter(user_id=call.identity.user_id, pinned=True)
        return await self._list(
            call, where, "No pinned facts. /pin fact N keeps one from fading.", "Pinned facts:"
        )

    async def forget(self, call: CommandCall) -> list[Outbound]:
        """``/forget fact N`` deletes a learned fact; anything else forgets a memory."""
        if not call.args.lower().startswith("fact ") and call.args.lower() != "fact":
            if self._forget_memory is None:
                raise UserError("Usage: /forget fact N (see /facts for the numbers).")
            return await self._forget_memory(call)
        fact_id = _fact_number(call.args, "Usage: /forget fact N (see /facts for the numbers).")
        gone = await self._facts.delete(FactFilter(user_id=call.identity.user_id, ids=(fact_id,)))
        if not gone:
            raise UserError(f"No fact #{fact_id} of yours. /facts lists them.")
        return [notice(f"Forgot fact #{fact_id}.", call.session_id)]

    async def pin(self, call: CommandCall) -> list[Outbound]:
        """Pin one of the caller's facts: it never decays."""
        return await self._set_pin(call, True)

    async def unpin(self, call: CommandCall) -> list[Outbound]:
        """Unpin one of the caller's facts."""
        return await self._set_pin(call, False)

    async def _set_pin(self, call: CommandCall, pinned: bool) -> list[Outbound]:
        verb = "pin" if pinned else "unpin"
        fact_id = _fact_number(call.args, f"Usage: /{verb} fact N (see /facts for the numbers).")
        fact = await self._facts.set_pinned(call.identity.user_id, fact_id, pinned)
        if fact is None:
            raise UserError(f"No fact #{fact_id} of yours. /facts lists them.")
        state = "pinned: it will not fade" if pinned else "unpinned: it fades when unused"
        return [notice(f"Fact #{fact_id} is {state}.", call.session_id)]

    async def reflect(self, call: CommandCall) -> list[Outbound]:
        """Learn from the current session's unread messages now."""
        if not self._facts.learns:
            why = f" ({self._facts.off_because})" if self._facts.off_because else ""
            raise UserError(f"Learning is switched off on this server{why}.")
        if call.session_id is None:
            raise UserError("There is no conversation here to reflect on yet.")
        done = await self._facts.reflect(call.session_id)
        if not done.messages:
            text = "Nothing new to reflect on since last time."
        else:
            text = (
                f"Reflected on {done.messages} messages:"
                f" {done.created} new facts, {done.reinforced} confirmed. /facts lists them."
            )
            if done.stored:
                text += " A reflection of this conversation is stored."
        return [notice(text, call.session_id)]

"""/pin, /unpin and /pins for messages (facts keep theirs), and /new ending a session.

Wraps the fact commands registered before (:mod:`picobot.commands.facts`):
``/pin fact N`` still pins a fact; ``/pin`` pins the last exchange of the current
session (the last user message and the reply to it), ``/pin message N`` one message by
its number (``/pins`` and ``/search`` show them). Every command acts on the caller's own
messages only: a number of someone else's is answered like one that does not exist.
``/new`` still starts a session, and the one left behind gets its reflection in the
background (when learning is on).
"""

from __future__ import annotations

import time

from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter, Handler
from picobot.messages import Outbound, notice
from picobot.numbers import parse_digits
from picobot.services.facts import FactService
from picobot.services.pins import PinService
from picobot.store.learned.pins import PinnedMessage
from picobot.text.untrusted import one_line

MAX_LISTED = 50
"""Most pinned messages one /pins answer lists."""
PREVIEW_CHARS = 80


def pin_line(pin: PinnedMessage) -> str:
    """One pinned message as /pins lists it: ``#12 user 2024-05-01: text...``."""
    text = one_line(pin.content)
    text = text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
    day = time.strftime("%Y-%m-%d", time.gmtime(pin.created_at))
    return f"#{pin.message_id} {pin.role} {day}: {text}"


def _numbers(ids: list[int]) -> str:
    return " and ".join(f"#{i}" for i in ids)


class PinCommands:
    """Message pins and the end of a session on ``/new``; see the module docstring."""

    def __init__(self, pins: PinService, facts: FactService) -> None:
        self._pins = pins
        self._facts = facts
        self._fact: dict[str, Handler] = {}
        self._new: Handler | None = None

    def register(self, router: CommandRouter) -> None:
        """Add the commands, keeping the fact pins and /new registered before."""
        for name in ("pin", "unpin", "pins"):
            previous = router.get(name)
            if previous is not None:
                self._fact[name] = previous.handler
        facts = "pin" in self._fact
        also = " | /pin fact N" if facts else ""
        router.add("pin", f"/pin | /pin message N{also}", "keep a message past retention", self.pin)
        router.add(
            "unpin", f"/unpin | /unpin message N{also.replace('pin', 'unpin')}",
            "let a pinned message expire again", self.unpin,
        )  # fmt: skip
        router.add("pins", "/pins", "list your pinned messages and facts", self.pins)
        new = router.get("new")
        if new is not None:
            self._new = new.handler
            router.add("new", new.usage, new.help, self.new)

    async def pin(self, call: CommandCall) -> list[Outbound]:
        """Pin the last exchange, a message, or (delegated) a fact."""
        return await self._set(call, True)

    async def unpin(self, call: CommandCall) -> list[Outbound]:
        """Unpin the last exchange, a message, or (delegated) a fact."""
        return await self._set(call, False)

    async def _set(self, call: CommandCall, pinned: bool) -> list[Outbound]:
        verb = "pin" if pinned else "unpin"
        word, _, rest = call.args.partition(" ")
        fact_handler = self._fact.get(verb)
        if word.lower() == "fact" and fact_handler is not None:
            return await fact_handler(call)
        user = call.identity.user_id
        if not call.args:
            if call.session_id is None:
                raise UserError("There is no conversation here yet to pin.")
            ids = await self._pins.last_exchange(user, call.session_id)
            if not ids:
                raise UserError("There is no exchange in this session yet to pin.")
        else:
            number = rest.strip().lstrip("#")
            message_id = parse_digits(number)
            if word.lower() != "message" or message_id is None:
                raise UserError(f"Usage: /{verb}, /{verb} message N or /{verb} fact N.")
            ids = [message_id]
        changed = await self._pins.set_pinned(user, ids, pinned)
        if changed is None:
            raise UserError(f"No message {_numbers(ids)} of yours. /pins lists your pins.")
        if pinned:
            text = f"Pinned message {_numbers(ids)}: kept until you unpin or delete it."
        else:
            text = f"Unpinned message {_numbers(ids)}: it expires like the rest again."
        if not changed:
            text = f"Message {_numbers(ids)} was already {'pinned' if pinned else 'unpinned'}."
        return [notice(text, call.session_id)]

    async def pins(self, call: CommandCall) -> list[Outbound]:
        """The caller's pinned messages, then their pinned facts."""
        found = await self._pins.list(call.identity.user_id, MAX_LISTED + 1)
        if found:
            lines = [pin_line(p) for p in found[:MAX_LISTED]]
            if len(found) > MAX_LISTED:
                lines.append(f"(the first {MAX_LISTED})")
            out = [notice("Pinned messages:\n" + "\n".join(lines), call.session_id)]
        else:
            out = [notice("No pinned messages. /pin keeps the last exchange.", call.session_id)]
        facts = self._fact.get("pins")
        return out + (await facts(call) if facts is not None else [])

    async def new(self, call: CommandCall) -> list[Outbound]:
        """Start a fresh session; the one left behind is reflected on in the background."""
        assert self._new is not None  # registered only when /new exists
        events = await self._new(call)
        self._facts.session_ended(call.session_id)
        return events

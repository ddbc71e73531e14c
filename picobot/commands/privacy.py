"""/learning off|on, /recall off|on, /privacy and /sensitive: what the bot may do with
the caller's data.

Each acts on the caller's own switches only (the user id comes from the channel's
authenticated identity); see :mod:`picobot.services.preferences` for what they change.
"""

from __future__ import annotations

from picobot.access.context import ToolContext
from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter
from picobot.messages import Outbound, notice
from picobot.services.notes import NoteService
from picobot.services.preferences import PreferenceService
from picobot.store.conversation.preferences import Preferences, Switch

_MEANING: dict[Switch, tuple[str, str]] = {
    "learning": (
        "I learn facts about you from our chats (/facts lists them).",
        "I learn nothing new about you: no facts, no reflections. What I learned before "
        "stays until you delete it (/facts, /purge).",
    ),
    "recall": (
        "I recall earlier conversations and what I learned about you when I answer.",
        "I answer from this conversation and your /remember notes only: nothing recalled "
        "from earlier conversations, no learned facts.",
    ),
}


def _state(prefs: Preferences, switch: Switch) -> str:
    on = bool(getattr(prefs, switch))
    return f"{switch} {'on' if on else 'off'}: {_MEANING[switch][0 if on else 1]}"


class PrivacyCommands:
    """The caller's switches; see the module docstring."""

    def __init__(self, preferences: PreferenceService, notes: NoteService | None = None) -> None:
        self._prefs = preferences
        self._notes = notes

    def register(self, router: CommandRouter) -> None:
        """Add /learning, /recall and /privacy to a router."""
        router.add(
            "learning", "/learning off|on", "stop or allow learning facts about you", self.learning
        )
        router.add(
            "recall", "/recall off|on", "stop or allow recalling past conversations", self.recall
        )
        router.add("privacy", "/privacy", "show what the bot may do with your data", self.privacy)
        if self._notes is not None:
            router.add(
                "sensitive",
                "/sensitive key | /sensitive off key",
                "keep a note out of recall and the prompt (or let it back in)",
                self.sensitive,
            )

    async def learning(self, call: CommandCall) -> list[Outbound]:
        """Turn learning about the caller on or off."""
        return await self._switch(call, "learning")

    async def recall(self, call: CommandCall) -> list[Outbound]:
        """Turn recall for the caller on or off."""
        return await self._switch(call, "recall")

    async def _switch(self, call: CommandCall, switch: Switch) -> list[Outbound]:
        word = call.args.strip().lower()
        if word not in ("on", "off"):
            prefs = await self._prefs.get(call.identity.user_id)
            raise UserError(f"Usage: /{switch} off or /{switch} on. Now: {_state(prefs, switch)}")
        changed = await self._prefs.set(call.identity.user_id, switch, word == "on")
        prefs = await self._prefs.get(call.identity.user_id)
        on = getattr(prefs, switch)
        now = f"{switch.capitalize()} is {'' if changed else 'already '}{'on' if on else 'off'}"
        return [notice(f"{now}: {_MEANING[switch][0 if on else 1]}", call.session_id)]

    async def privacy(self, call: CommandCall) -> list[Outbound]:
        """The caller's switches and how to change them."""
        prefs = await self._prefs.get(call.identity.user_id)
        lines = [
            "What I may do with your data:",
            *(f"- {_state(prefs, s)}" for s in ("learning", "recall")),
            "Change them with /learning off|on and /recall off|on; /purge deletes your data.",
        ]
        return [notice("\n".join(lines), call.session_id)]

    async def sensitive(self, call: CommandCall) -> list[Outbound]:
        """Mark one of the caller's notes sensitive (``off``: not any more)."""
        assert self._notes is not None  # registered only with notes
        word, _, rest = call.args.partition(" ")
        on = word.lower() != "off"
        key = call.args if on else rest
        if not key.strip():
            raise UserError("Usage: /sensitive key or /sensitive off key (/memories lists yours).")
        ident = call.identity
        ctx = ToolContext(user_id=ident.user_id, session_id=call.session_id, channel=ident.channel)
        memory = await self._notes.set_sensitive(ctx, key, on)
        if on:
            text = (
                f"Memory {memory.key!r} is sensitive: kept out of recall, the prompt and "
                "the model's memory tool. It is still yours: listed, exported and purged."
            )
        else:
            text = f"Memory {memory.key!r} is no longer sensitive: it shapes answers again."
        return [notice(text, call.session_id)]

"""``/edit``: write one of your messages again and get a new answer, keeping the old one.

``/edit new text`` replaces your last message of this session, ``/edit N new text`` (or
``#N``, named as ``/rewind`` and ``/delete`` name messages) an earlier one. Nothing is
deleted: a new session is forked from the current one just before that message (the
same history before it, none after), the chat switches to it, as ``/fork`` does, and
the new text is its next message, answered as any message is. The old session stays
as it was, a branch of its own (``/resume`` goes back to it), and the new one's prompt
leaves out everything the edit replaced (see :mod:`picobot.store.conversation.branches`).
"""

from __future__ import annotations

import re

from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter, TurnAfter
from picobot.messages import notice
from picobot.services.sessions import SessionService

from .history import named_message

EDIT_USAGE = (
    "Usage: /edit new text (replaces your last message) or /edit N new text, where N is a"
    ' message id ("message N" in /search) or #N the message number in this session. To'
    " begin the new text with a number, name the message first."
)
_REFERENCE = re.compile(r"#?[0-9]+")


class EditCommands:
    """The chat side of editing a message: a branch, and the new text answered there."""

    def __init__(self, sessions: SessionService) -> None:
        self._sessions = sessions

    def register(self, router: CommandRouter) -> None:
        """Add /edit to a router."""
        router.add_turn(
            "edit",
            "/edit text | /edit N text",
            "write your last message (or message N) again and get a new answer;"
            " the old version stays a session of its own",
            self.edit,
        )

    async def edit(self, call: CommandCall) -> TurnAfter:
        """Fork the session before the message, switch to it, and send the new text."""
        first, *rest = call.args.split(maxsplit=1) or [""]
        named = _REFERENCE.fullmatch(first) is not None
        text = "".join(rest) if named else call.args
        if not text:
            raise UserError(EDIT_USAGE)
        if CommandRouter.is_command(text):
            raise UserError("The new text of a message cannot be a command.")
        if call.session_id is None:
            raise UserError("There is no message of yours in this session to edit.")
        if named:
            at_seq = self._sessions.message_at
            message_id = await named_message(first, EDIT_USAGE, call.session_id, at_seq)
        else:
            found = await self._sessions.last_user_message(call.session_id)
            if found is None:
                raise UserError("There is no message of yours in this session to edit.")
            message_id = found
        ident = call.identity
        chat = (ident.channel, ident.chat_id, ident.user_id)
        branch = await self._sessions.branch_before(chat, call.session_id, message_id)
        told = (
            f"Edited message {message_id}: this chat goes on in session {branch}, forked just"
            f" before it. The old version stays in session {call.session_id}"
            f" (/resume {call.session_id})."
        )
        # The turn's own session event follows once the new text is stored.
        return TurnAfter([notice(told, branch)], branch, text)

"""``/undo``, ``/rewind N`` and ``/delete N``: take back part of a conversation.

Each plans a purge of chosen messages (:class:`~picobot.privacy.message_scope.MessagesScope`)
and asks for the same y/n confirmation as ``/purge``, stating what will be deleted;
the answer is taken by ``/purge``'s interceptor and token confirmation
(:mod:`picobot.commands.purge`), so the token is single use, expiring and bound to the
user. On a messaging platform the question also says that the platform's own copy of
the messages is the platform's: PicoBot can delete only what it stored.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from picobot.errors import UserError
from picobot.kernel.commands import CommandCall, CommandRouter
from picobot.messages import Outbound, OutboundKind, notice
from picobot.numbers import parse_digits
from picobot.privacy.message_scope import (
    NO_MESSAGE,
    MessagesScope,
    message_scope,
    rewind_scope,
    undo_scope,
)
from picobot.services.purges import PurgeService
from picobot.store.db import Database
from picobot.store.erasure.message_purge import id_at_seq

from .purge import TOKEN_CHANNELS, actor_of

REWIND_USAGE = (
    'Usage: /rewind N, where N is a message id ("message N" in /search) or #N the'
    ' message number in this session ("#N").'
)
DELETE_USAGE = REWIND_USAGE.replace("/rewind", "/delete")
PLATFORM_NAMES = {"telegram": "Telegram", "whatsapp": "WhatsApp", "slack": "Slack"}


def platform_note(channel: str) -> str:
    """What a platform keeps of the messages, in the words of the confirmation ("" for
    PicoBot's own clients, which keep nothing of their own)."""
    if channel in TOKEN_CHANNELS:
        return ""
    name = PLATFORM_NAMES.get(channel, "the platform")
    return (
        f" This deletes what PicoBot stored; the copy {name} keeps of these messages is"
        f" {name}'s, delete it there."
    )


def _number(text: str, usage: str) -> int:
    n = parse_digits(text)
    if n is None or n < 1:
        raise UserError(usage)
    return n


async def named_message(
    text: str,
    usage: str,
    session_id: str | None,
    at_seq: Callable[[str, int], Awaitable[int | None]],
) -> int:
    """The message id ``text`` names: ``N`` (a message id, "message N" in /search) or
    ``#N`` (number N of the current session ``session_id``, "#N" in /search, looked up
    with ``at_seq``); UserError ``usage`` for anything else."""
    if not text.startswith("#"):
        return _number(text, usage)
    seq = _number(text[1:], usage)
    found = None if session_id is None else await at_seq(session_id, seq)
    if found is None:
        raise UserError(NO_MESSAGE)
    return found


class HistoryCommands:
    """The chat side of undo, rewind and deleting one message."""

    def __init__(self, purges: PurgeService) -> None:
        self._purges = purges

    def register(self, router: CommandRouter) -> None:
        """Add /undo, /rewind and /delete to a router."""
        router.add("undo", "/undo", "delete the last exchange of this session", self.undo)
        router.add(
            "rewind", "/rewind N", "delete everything after message N of its session", self.rewind
        )
        router.add("delete", "/delete N", "delete message N, one you wrote", self.delete)

    async def undo(self, call: CommandCall) -> list[Outbound]:
        """Plan deleting the current session's last exchange."""
        if call.args.strip():
            raise UserError("Usage: /undo (it takes back the last exchange).")
        if not call.session_id:
            raise UserError("There is nothing to undo in this session.")
        return await self._ask(call, await undo_scope(self._db(), call.session_id))

    async def rewind(self, call: CommandCall) -> list[Outbound]:
        """Plan deleting everything after a message."""
        n = await self._message(call, REWIND_USAGE)
        return await self._ask(call, await rewind_scope(self._db(), n))

    async def delete(self, call: CommandCall) -> list[Outbound]:
        """Plan deleting one message the user wrote."""
        n = await self._message(call, DELETE_USAGE)
        return await self._ask(call, await message_scope(self._db(), n, own=True))

    async def _message(self, call: CommandCall, usage: str) -> int:
        at_seq = functools.partial(id_at_seq, self._db())
        return await named_message(call.args.strip(), usage, call.session_id, at_seq)

    def _db(self) -> Database:
        return self._purges.controller.db

    async def _ask(self, call: CommandCall, scope: MessagesScope) -> list[Outbound]:
        ident = call.identity
        pending = await self._purges.request(scope, actor_of(ident), (ident.channel, ident.chat_id))
        if pending.plan.counts.total == 0:
            return [notice(pending.plan.prompt(), call.session_id)]
        return [
            Outbound(
                OutboundKind.CONFIRM_REQUEST,
                pending.plan.prompt() + platform_note(ident.channel),
                session_id=call.session_id,
                token=pending.token,
            )
        ]

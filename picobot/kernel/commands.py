"""Slash commands, the same in every channel.

A command is a coroutine taking a :class:`CommandCall` and returning the events to
emit, or a :class:`TurnAfter` when it goes on as a turn (``/edit``). The kernel routes
any message starting with ``/`` here; unknown commands get a clear notice instead of
going to the model.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from picobot.errors import UserError
from picobot.messages import Identity, Outbound, OutboundKind, notice
from picobot.store.conversation.sessions import SessionRepo


@dataclass(frozen=True, slots=True)
class CommandCall:
    """One invocation: who, in which session, with which argument text."""

    identity: Identity
    session_id: str | None
    args: str


@dataclass(frozen=True, slots=True)
class TurnAfter:
    """A command's answer that goes on as a turn: ``events`` first, then ``text`` is the
    caller's message in ``session_id`` (a session of theirs the command made current),
    stored and answered like any message."""

    events: list[Outbound]
    session_id: str
    text: str


Handler = Callable[[CommandCall], Awaitable[list[Outbound]]]
TurnHandler = Callable[[CommandCall], Awaitable[TurnAfter]]


@dataclass(frozen=True, slots=True)
class Command:
    """A named command with its one-line help."""

    name: str
    usage: str
    help: str
    handler: Handler


@dataclass(frozen=True, slots=True)
class TurnCommand:
    """A named command that goes on as a turn, with its one-line help."""

    name: str
    usage: str
    help: str
    handler: TurnHandler


class CommandRouter:
    """Parses ``/name args`` and dispatches to registered commands."""

    def __init__(self) -> None:
        self._commands: dict[str, Command | TurnCommand] = {}
        self.add("help", "/help", "list the commands", self._help)

    def add(self, name: str, usage: str, help_text: str, handler: Handler) -> None:
        """Register a command; later channels and features add theirs the same way."""
        self._commands[name] = Command(name, usage, help_text, handler)

    def add_turn(self, name: str, usage: str, help_text: str, handler: TurnHandler) -> None:
        """Register a command that goes on as a turn (see :class:`TurnAfter`)."""
        self._commands[name] = TurnCommand(name, usage, help_text, handler)

    def get(self, name: str) -> Command | None:
        """The command registered as ``name`` (a feature may wrap it), or None."""
        command = self._commands.get(name)
        return command if isinstance(command, Command) else None

    @staticmethod
    def is_command(text: str) -> bool:
        """Whether a message is a command rather than chat."""
        return text.startswith("/") and len(text) > 1 and not text.startswith("//")

    async def dispatch(
        self, identity: Identity, session_id: str | None, text: str
    ) -> list[Outbound] | TurnAfter:
        """Run the command named in ``text``."""
        # Any whitespace ends the name: a line break or tab is where a space was meant.
        name, *args = text[1:].split(maxsplit=1) or [""]
        command = self._commands.get(name.lower())
        if command is None:
            raise UserError(f"Unknown command /{name}. Type /help for the list.")
        return await command.handler(CommandCall(identity, session_id, "".join(args).strip()))

    async def _help(self, call: CommandCall) -> list[Outbound]:
        width = max(len(c.usage) for c in self._commands.values())
        lines = [f"{c.usage.ljust(width)}  {c.help}" for c in self._commands.values()]
        return [notice("Commands:\n" + "\n".join(lines), call.session_id)]


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


class SessionCommands:
    """/new, /sessions, /resume ID, /fork: session continuity in every channel."""

    def __init__(
        self, sessions: SessionRepo, forked: Callable[[str, str], None] | None = None
    ) -> None:
        self._sessions = sessions
        # Told (parent, fork) after a fork: the prompt builder starts it where the parent is.
        self._forked = forked

    def register(self, router: CommandRouter) -> None:
        """Add the session commands to a router."""
        router.add("new", "/new", "start a fresh session", self.new)
        router.add("sessions", "/sessions", "list your sessions", self.list_sessions)
        router.add("resume", "/resume ID", "switch to one of your sessions", self.resume)
        router.add("fork", "/fork", "branch a new session from this one", self.fork)

    async def new(self, call: CommandCall) -> list[Outbound]:
        """Start a fresh session and make it current."""
        ident = call.identity
        sid = await self._sessions.create(ident.channel, ident.chat_id, ident.user_id)
        return [_session(sid), notice(f"Started a new session {sid}.", sid)]

    async def list_sessions(self, call: CommandCall) -> list[Outbound]:
        """The caller's own sessions, most recent first."""
        rows = await self._sessions.list_sessions(call.identity.user_id, limit=20)
        if not rows:
            return [notice("You have no sessions yet.", call.session_id)]
        lines = [
            f"{'*' if r.id == call.session_id else ' '} {r.id}  {r.message_count:>4} msgs"
            f"  last active {_when(r.last_active)}"
            for r in rows
        ]
        return [notice("Your sessions (* = current):\n" + "\n".join(lines), call.session_id)]

    async def resume(self, call: CommandCall) -> list[Outbound]:
        """Switch to one of the caller's sessions; anyone else's is refused."""
        sid = call.args.split()[0] if call.args else ""
        if not sid:
            raise UserError("Usage: /resume ID (see /sessions for your session ids).")
        info = await self._sessions.get(sid)
        # Same answer for "missing" and "someone else's": do not reveal that it exists.
        if info is None or info.user_id != call.identity.user_id:
            raise UserError(f"No session {sid} of yours. See /sessions.")
        ident = call.identity
        await self._sessions.set_current(ident.channel, ident.chat_id, ident.user_id, sid)
        return [
            _session(sid),
            notice(f"Resumed session {sid} ({info.message_count} messages).", sid),
        ]

    async def fork(self, call: CommandCall) -> list[Outbound]:
        """A new session whose parent is the current one, carrying its transcript."""
        if call.session_id is None:
            raise UserError("There is no current session to fork yet; just start chatting.")
        ident = call.identity
        sid = await self._sessions.create(
            ident.channel, ident.chat_id, ident.user_id, parent_session_id=call.session_id
        )
        if self._forked is not None:
            self._forked(call.session_id, sid)
        return [_session(sid), notice(f"Forked session {call.session_id} into {sid}.", sid)]


def _session(session_id: str) -> Outbound:
    return Outbound(OutboundKind.SESSION, session_id=session_id)

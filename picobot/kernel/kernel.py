"""The kernel: one :class:`Inbound` in, an async stream of :class:`Outbound` out.

A turn resolves the chat's session (a known chat's is remembered, and checked in the
write that stores its message), commits the user's message before the model is
called (a crash mid-turn loses nothing the user sent), builds the prompt through the
retriever seam, streams the model's answer, runs requested tools through the registry
with the caller's :class:`ToolContext`, and commits the reply. No transport code lives
here: a kernel test needs no socket.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

from picobot.access.context import Grant, ToolContext, own_data_grants
from picobot.errors import LLMError, StoreUnavailable, UserError
from picobot.kernel.commands import CommandRouter, SessionCommands, TurnAfter
from picobot.kernel.failures import COMMAND_FAILED as COMMAND_FAILED  # re-exported
from picobot.kernel.failures import (
    INTERNAL_FAILED,
    MODEL_FAILED,
    REPLY_STORE_FAILED,
    SESSION_GONE,
    STORE_FAILED,
    safely,
)
from picobot.kernel.prompt import ContextRetriever, PromptRequest
from picobot.kernel.prompt.tool_budget import ToolBudget
from picobot.llm.base import CONVERSATION, LLMProvider, TextDelta, ToolCall, ToolCalls
from picobot.messages import Identity, Inbound, Outbound, OutboundKind, error, storable
from picobot.metrics import METRICS, observe_turn
from picobot.store.conversation.messages import (
    HoldCheck,
    MessageHeld,
    MessageRepo,
    NotCurrentSession,
    SessionGone,
    StoredMessage,
)
from picobot.store.conversation.sessions import ChatKey, SessionRepo
from picobot.store.conversation.tool_records import ToolRecordRepo
from picobot.store.db import Database
from picobot.tasks.reply_learning import ReplyLearner
from picobot.text.tokens import TokenEstimator
from picobot.tools.base import ToolRegistry

log = logging.getLogger(__name__)

MAX_SESSION_HINTS = 10_000
"""Chats whose current session the kernel remembers (the oldest is forgotten first)."""
ROUND_BREAK = "\n\n"
"""Put between the text of two model calls of one turn (before and after a tool ran)."""


def _runs_on(parts: list[str], text: str) -> bool:
    """True when ``text`` would run straight on from what ``parts`` already said."""
    return bool(parts) and not parts[-1][-1:].isspace() and not text[:1].isspace()


@dataclass(frozen=True, slots=True)
class Interceptor:
    """A hook that may consume a message before it is stored (a pending y/n answer).

    ``awaits(identity)`` is None when nothing ever waits for that identity's messages,
    else a check that the write storing the message runs first: only when it is true
    is ``answer`` called, which consumes the message (its events) or returns None. A
    remembered chat's turn so makes no read of its own for a hook that is rarely armed.
    """

    awaits: Callable[[Identity], HoldCheck | None]
    answer: Callable[[Identity, str], Awaitable[list[Outbound] | None]]


Confirmation = Callable[[Identity, str, str], Awaitable[list[Outbound]]]
AfterTurn = Callable[[ToolContext], Awaitable[list[Outbound]]]


@dataclass(frozen=True, slots=True)
class History:
    """A chat's current session and its recent messages, oldest first."""

    session_id: str | None
    messages: list[StoredMessage]


class Kernel:
    """Turn orchestration; channels call :meth:`handle` and render what it yields."""

    def __init__(
        self,
        *,
        db: Database,
        provider: LLMProvider,
        retriever: ContextRetriever,
        estimator: TokenEstimator,
        tools: ToolRegistry | None = None,
        system_prompt: str = "",
        max_tool_rounds: int = 4,
        clock: Callable[[], float] = time.time,
        grants: Callable[[str], frozenset[Grant]] | None = None,
        budget_tokens: int | None = None,
    ) -> None:
        self.db = db
        self.provider = provider
        self.sessions = SessionRepo(db)
        self.messages = MessageRepo(db)
        self.tool_records = ToolRecordRepo(db)
        self.retriever = retriever
        self.estimator = estimator
        self.tools = tools or ToolRegistry()
        self.system_prompt = system_prompt
        self.max_tool_rounds = max_tool_rounds
        # The prompt budget that tool rounds must stay within too (None: unchecked).
        self.budget_tokens = budget_tokens
        self.clock = clock
        self.grants = grants or (lambda _user_id: own_data_grants())
        # Called with the turn's context after each committed reply; listeners must
        # not block (the summarizer only schedules work here).
        self.turn_listeners: list[Callable[[ToolContext], None]] = []
        # Awaited after each turn's reply (and each command that switched the session), in
        # the session's lock; their notices follow the turn's events (the storage caps).
        self.after_turn: list[AfterTurn] = []
        # Hooks that may consume a message before anything else (a pending y/n answer).
        self.interceptors: list[Interceptor] = []
        # Answers carrying a confirmation token (TUI, WebSocket); set by privacy.
        self.confirmation: Confirmation | None = None
        # Set when learning is on: [MEMORY:...] reply lines are hidden, then learned.
        self.learner: ReplyLearner | None = None
        self.commands = CommandRouter()
        SessionCommands(self.sessions, getattr(retriever, "inherit", None)).register(self.commands)
        # One turn at a time per session, so replies land in the order asked.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        # Each chat's session as last resolved: a hint that spares a turn the read that
        # looks it up. The turn's first write checks it (append(if_current_of=...)), so a
        # session switched or purged elsewhere is never written to.
        self._session_hints: dict[ChatKey, str] = {}

    def context_for(self, identity: Identity, session_id: str | None) -> ToolContext:
        """The ToolContext of a turn: the authenticated user and their own-data grants."""
        return ToolContext(
            user_id=identity.user_id,
            session_id=session_id,
            channel=identity.channel,
            grants=self.grants(identity.user_id),
        )

    async def handle(self, inbound: Inbound) -> AsyncIterator[Outbound]:
        """Process one message; yield the events to render. Never raises for user errors."""
        text = inbound.text.strip()
        if not text:
            yield error("Empty message.", code="empty")
            return
        if not storable(text, inbound.session_id or ""):
            yield error("The message is not valid Unicode and was not saved.", code="bad_text")
            return
        is_command = CommandRouter.is_command(text)
        # A channel that may hand a message over twice names it (webhooks, see _turn).
        source = f"{inbound.identity.channel}:{inbound.message_id}" if inbound.message_id else None
        chat = (inbound.identity.channel, inbound.identity.chat_id, inbound.identity.user_id)
        hint = None if is_command or inbound.session_id else self._session_hints.get(chat)
        if hint is not None:
            unless = self._awaits(inbound.identity)
            try:
                async for event in self._turn(inbound.identity, hint, text, source, chat, unless):
                    yield event
                return
            except MessageHeld:  # raised before any event: an interceptor takes it below
                pass
            except NotCurrentSession:  # raised before any event: resolve it as below
                self._session_hints.pop(chat, None)
        ident = inbound.identity
        for intercept in self.interceptors:
            if intercept.awaits(ident) is None:
                continue
            consumed = await safely(ident, None, intercept.answer(ident, text))
            if consumed is not None:
                for event in consumed:
                    yield event
                return
        try:
            session_id = await self._resolve_session(inbound, create=not is_command)
        except UserError as exc:
            yield error(str(exc), code="denied")
            return
        except StoreUnavailable:
            log.exception("store unavailable resolving the session of %s", inbound.identity.user_id)
            yield error(STORE_FAILED, code="store_unavailable")
            return
        if is_command:
            async for event in self._command(inbound.identity, session_id, text, chat):
                yield event
            return
        assert session_id is not None
        self._remember(chat, session_id)
        async for event in self._turn(inbound.identity, session_id, text, source, None):
            yield event

    def _awaits(self, identity: Identity) -> HoldCheck | None:
        """The interceptors' checks for ``identity``'s next message, as one (or None)."""
        checks = [c for i in self.interceptors if (c := i.awaits(identity)) is not None]
        if len(checks) <= 1:
            return checks[0] if checks else None
        return lambda conn: any(check(conn) for check in checks)

    def _remember(self, chat: ChatKey, session_id: str) -> None:
        self._session_hints.pop(chat, None)
        self._session_hints[chat] = session_id
        if len(self._session_hints) > MAX_SESSION_HINTS:
            del self._session_hints[next(iter(self._session_hints))]

    async def confirm(self, identity: Identity, token: str, answer: str) -> AsyncIterator[Outbound]:
        """Answer a confirmation request by its token (only the requester's is accepted)."""
        if self.confirmation is None:
            yield error("Nothing is waiting for confirmation.", code="confirm")
            return
        events = await safely(identity, None, self.confirmation(identity, token, answer))
        for event in events or []:
            yield event

    async def recent_history(self, identity: Identity, limit: int = 50) -> History:
        """The chat's current session and its last ``limit`` messages (none created)."""
        sid = await self.sessions.current(identity.channel, identity.chat_id, identity.user_id)
        if sid is None:
            return History(None, [])
        return History(sid, await self.messages.last(sid, limit))

    async def _resolve_session(self, inbound: Inbound, *, create: bool) -> str | None:
        """The session to use: the requested one if it is the caller's, else the chat's."""
        ident = inbound.identity
        if inbound.session_id:
            info = await self.sessions.get(inbound.session_id)
            if info is None or info.user_id != ident.user_id:
                raise UserError(f"No session {inbound.session_id} of yours.")
            await self.sessions.set_current(ident.channel, ident.chat_id, ident.user_id, info.id)
            return info.id
        current = await self.sessions.current(ident.channel, ident.chat_id, ident.user_id)
        if current is not None or not create:
            return current
        return await self.sessions.current_or_create(ident.channel, ident.chat_id, ident.user_id)

    async def _command(
        self, identity: Identity, session_id: str | None, text: str, chat: ChatKey
    ) -> AsyncIterator[Outbound]:
        result = await safely(
            identity, session_id, self.commands.dispatch(identity, session_id, text)
        )
        if not isinstance(result, TurnAfter):
            for event in result:
                yield event
            # A session the command switched to (a new one, a fork) is held to the caps too.
            for sid in {e.session_id for e in result if e.kind is OutboundKind.SESSION}:
                if sid and self.after_turn:
                    async with self._locks.setdefault(sid, asyncio.Lock()):
                        after = await self._after_turn(self.context_for(identity, sid))
                    for event in after:
                        yield event
            return
        for event in result.events:
            yield event
        # The command made the session current; its turn writes there whatever happens
        # to the chat meanwhile (the session is the caller's, just checked). The turn
        # applies the caps afterwards, as every turn does.
        self._remember(chat, result.session_id)
        async for event in self._turn(identity, result.session_id, result.text, None, None):
            yield event

    async def _turn(
        self,
        identity: Identity,
        session_id: str,
        text: str,
        source: str | None,
        chat: ChatKey | None,
        unless: HoldCheck | None = None,
    ) -> AsyncIterator[Outbound]:
        """One turn in ``session_id``, under its lock (replies land in the order asked).

        With ``chat``, only while that is the chat's current session: otherwise
        :class:`NotCurrentSession` is raised before anything is stored or yielded. When
        ``unless`` holds in the write that would store the message, :class:`MessageHeld`
        is raised instead, as early.
        """
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            started = time.monotonic()
            try:
                # The store redacts what it writes; the prompt is built from what it stored.
                current = await self.messages.append(
                    session_id,
                    "user",
                    text,
                    self.estimator.estimate,
                    created_at=self.clock(),
                    source_id=source,
                    if_current_of=chat,
                    unless=unless,
                )
                # Handed over again (a webhook turn a crash cut short), the message was found
                # stored, not stored twice; if its reply was stored too, that is the answer.
                after = None if source is None else await self.messages.following(current)
            except StoreUnavailable:
                log.exception("could not store the message of %s", identity.user_id)
                yield error(STORE_FAILED, code="store_unavailable", session_id=session_id)
                return
            except SessionGone:
                if chat is not None:
                    raise  # the caller resolves the chat's session again
                yield error(SESSION_GONE, code="session_deleted", session_id=session_id)
                return
            # Sent only now: a client may take this event as proof its message is stored.
            yield Outbound(OutboundKind.SESSION, session_id=session_id)
            if after is not None and after.role == "assistant":
                log.info("message %s was answered already; resending the stored reply", source)
                yield Outbound(OutboundKind.DONE, after.content, session_id=session_id)
                return
            ctx = self.context_for(identity, session_id)
            parts: list[str] = []
            markers = self.learner.filter() if self.learner is not None else None
            try:
                request = PromptRequest(ctx, session_id, self.system_prompt, current)
                async for token in self._generate(ctx, request, parts):
                    if markers is not None:  # a marker line is held back, then dropped
                        token = markers.feed(token)
                    if token:
                        yield Outbound(OutboundKind.TOKEN, token, session_id=session_id)
                if markers is not None and (tail := markers.finish()):
                    yield Outbound(OutboundKind.TOKEN, tail, session_id=session_id)
                said = markers.text if markers is not None else "".join(parts)
                stored = await self.messages.append(
                    session_id,
                    "assistant",
                    said.strip() or "(no answer)",
                    self.estimator.estimate,
                    created_at=self.clock(),
                )
                reply = stored.content  # as stored: redacted
                if markers is not None and self.learner is not None:
                    await self.learner.learn(ctx, markers.observations, stored.id)
            except UserError as exc:
                yield error(str(exc), code="user", session_id=session_id)
                return
            except SessionGone:
                # Purged while the model answered: the reply has nowhere to go.
                log.info(
                    "session %s was deleted during a turn; its reply is not stored", session_id
                )
                yield error(SESSION_GONE, code="session_deleted", session_id=session_id)
                return
            except LLMError:
                METRICS.llm_errors.inc()
                log.exception("model failed in session %s", session_id)
                yield error(MODEL_FAILED, code="llm_error", session_id=session_id)
                return
            except StoreUnavailable:
                log.exception("could not store the reply in session %s", session_id)
                yield error(REPLY_STORE_FAILED, code="store_unavailable", session_id=session_id)
                return
            except Exception:
                log.exception("turn failed in session %s", session_id)
                yield error(INTERNAL_FAILED, code="internal", session_id=session_id)
                return
            observe_turn(identity.channel, time.monotonic() - started)
            yield Outbound(OutboundKind.DONE, reply, session_id=session_id)
            for listener in self.turn_listeners:
                try:
                    listener(ctx)
                except Exception:
                    log.exception("turn listener failed")
            for event in await self._after_turn(ctx):
                yield event

    async def _after_turn(self, ctx: ToolContext) -> list[Outbound]:
        """The notices of the :attr:`after_turn` hooks; a failing hook is logged, not shown
        (the turn it follows succeeded)."""
        events: list[Outbound] = []
        for hook in self.after_turn:
            try:
                events += await hook(ctx)
            except Exception:
                log.exception("after-turn work failed in session %s", ctx.session_id)
        return events

    async def _generate(
        self, ctx: ToolContext, request: PromptRequest, parts: list[str]
    ) -> AsyncIterator[str]:
        """Stream the answer, running tool rounds up to the cap; yield text tokens.

        Every model call stays within the prompt budget (see :mod:`tool_budget`).
        """
        prompt = await self.retriever.build(request)
        # A provider that keeps evaluated prompts keeps this session's apart from others'.
        CONVERSATION.set(request.session_id)
        specs = self.tools.specs()
        exchange = ToolBudget(self.estimator, self.budget_tokens)
        for round_no in range(self.max_tool_rounds + 1):
            # On the last round, or with the budget spent, no tools are offered, so the
            # model has to answer.
            offer = specs if round_no < self.max_tool_rounds and exchange.open else []
            calls: tuple[ToolCall, ...] = ()
            round_text: list[str] = []
            async for event in self.provider.stream([*prompt, *exchange.messages], offer):
                if isinstance(event, TextDelta):
                    if not round_text and _runs_on(parts, event.text):
                        # Text written before a tool ran ("Let me check.") and the answer
                        # after it are two paragraphs, not one run-together sentence.
                        parts.append(ROUND_BREAK)
                        yield ROUND_BREAK
                    round_text.append(event.text)
                    parts.append(event.text)
                    yield event.text
                elif isinstance(event, ToolCalls):
                    calls += event.calls
            if not calls or not offer:
                return
            offered = {spec.name for spec in specs}
            for call in exchange.call("".join(round_text), calls):
                exchange.result(call, await self._run_tool(ctx, call, offered))
            if exchange.overflows(prompt):
                prompt = await self.retriever.build(replace(request, reserve_tokens=exchange.used))

    async def _run_tool(self, ctx: ToolContext, call: ToolCall, offered: set[str]) -> str:
        """Run one call, recorded in one write as it ends, with when it started; events name
        only our own tools (a name the model made up is model output, never in events)."""
        started, sid = self.clock(), ctx.session_id
        ok, output = await self.tools.call(ctx, call.name, call.arguments)
        if sid is not None:
            label = call.name if call.name in offered else "unknown"
            # The store redacts both texts.
            await self.tool_records.add(
                sid,
                ctx.user_id,
                call.name,
                call.arguments,
                output,
                ok,
                self.clock(),
                event_name=label,
                started_at=started,
            )
            log.info("tool %s for %s: %s", call.name, ctx.user_id, "ok" if ok else "failed")
        return output

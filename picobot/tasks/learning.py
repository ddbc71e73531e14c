"""Background learning: extract facts from idle sessions, and decay stale facts.

Owned by the task supervisor, never run inside a chat turn (a turn makes exactly one
model call, plus its tool rounds). Extraction reads a session's messages that it has
not read yet (``fact_progress``), in chunks of at most
:data:`picobot.memory.extraction.MAX_INPUT_TOKENS`, one model call each, and stores
what the answers hold through the fact lifecycle with the session and the last user
message of the chunk as provenance. It runs for sessions idle for ``idle_secs``
(periodic check), after a session was summarized, on ``/reflect`` and on
``picobot facts extract``. Decay runs periodically.

Wiring (done by the runtime)::

    supervisor.every("learn", learning.check_interval_secs, task.check_idle)
    supervisor.every("fact-decay", learning.decay_interval_secs, task.decay)
    supervisor.every("reflect", learning.check_interval_secs, task.reflections.check_idle)

``task.reflections`` (:mod:`picobot.tasks.reflection`) shares the model, settings and
clock: session reflections and the digests they fold into.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from picobot.config.learning import LearningSettings
from picobot.config.settings import LLMSettings
from picobot.llm.base import LLMProvider
from picobot.memory.extraction import (
    ANSWER_SCHEMA,
    MAX_INPUT_TOKENS,
    build_prompt,
    chunk_messages,
    parse_reply,
)
from picobot.store.conversation.messages import StoredMessage, conversation_after
from picobot.store.conversation.preferences import learning_allowed
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.learned.fact_rules import lifecycle_rules
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import idle_unlearned
from picobot.tasks.reflection import ReflectionTask
from picobot.tasks.session_runs import SessionRuns
from picobot.text.tokens import TokenEstimator

log = logging.getLogger(__name__)

MAX_SESSIONS_PER_CHECK = 20
"""Idle sessions one periodic check learns from (the rest wait for the next)."""
MAX_MESSAGES_PER_RUN = 400
"""Messages one extraction run reads from a session (a long backlog takes several runs)."""


PROMPT_OVERHEAD_TOKENS = 400
"""What an extraction prompt costs beyond its quoted messages (instructions, framing,
a chat template's markers), rounded up."""


def extraction_input_tokens(llm: LLMSettings) -> int:
    """Most tokens of quoted messages per extraction call for the configured model.

    :data:`MAX_INPUT_TOKENS`, or less for the local model, whose context window is
    known: the prompt and the reply (``reply_tokens``) must fit in it.
    """
    if llm.provider != "local":
        return MAX_INPUT_TOKENS
    room = llm.context_tokens - llm.reply_tokens - PROMPT_OVERHEAD_TOKENS
    return max(1, min(MAX_INPUT_TOKENS, room))


@dataclass(frozen=True, slots=True)
class Extracted:
    """What one extraction run of a session did."""

    messages: int = 0
    calls: int = 0
    created: int = 0
    reinforced: int = 0
    failed: bool = False
    """The model or the store failed (or another run of the session was under way)."""


class LearningTask:
    """Extraction and decay of learned facts; see the module docstring."""

    def __init__(
        self,
        db: Database,
        provider: LLMProvider,
        estimator: TokenEstimator,
        settings: LearningSettings,
        *,
        redact: Callable[[str], str] | None = None,
        clock: Callable[[], float] = time.time,
        max_input_tokens: int = MAX_INPUT_TOKENS,
    ) -> None:
        self._db = db
        self._provider = provider
        self._estimator = estimator
        self.settings = settings
        # The store's redactor unless told otherwise (what reaches the model, too).
        self._redact: Callable[[str], str] = redact or (lambda text: db.redact(text))
        self.clock = clock
        """The time source (the runtime shares the kernel's, so tests can move it)."""
        self._chunk = max(1, max_input_tokens)
        self.store = FactStore(db, rules=lifecycle_rules(settings))
        self.reflections = ReflectionTask(
            db,
            provider,
            estimator,
            settings,
            redact=self._redact,
            clock=lambda: self.clock(),
            max_input_tokens=max_input_tokens,
        )
        """Session reflections and digests (same model, settings and clock)."""
        self._runs = SessionRuns("fact extraction", lambda: self.clock())

    @property
    def enabled(self) -> bool:
        """Whether learning is switched on."""
        return self.settings.enabled

    async def check_idle(self) -> str:
        """Learn from sessions idle for ``idle_secs`` with unread messages (periodic job)."""
        if not self.enabled:
            return "disabled"
        now = self.clock()
        held = self._runs.failures.all_held(now)
        idle = functools.partial(
            idle_unlearned,
            idle_before=now - self.settings.idle_secs,
            limit=MAX_SESSIONS_PER_CHECK + len(held),
        )
        due = [s for s in await self._db.read(idle) if s not in held][:MAX_SESSIONS_PER_CHECK]
        learned = 0
        for sid in due:
            learned += (await self.extract_session(sid)).created
        return f"{learned} facts learned from {len(due)} idle sessions"

    async def decay(self) -> str:
        """Apply the staleness decay (periodic job)."""
        if not self.enabled:
            return "disabled"
        changed = await self.store.decay(self.clock())
        if changed:
            log.info("fact decay lowered %d facts", changed)
        return f"{changed} facts decayed"

    async def extract_session(self, session_id: str) -> Extracted:
        """Learn from the messages of ``session_id`` not read yet; never raises.

        A failed model call leaves the progress where it was (the chunk is read again
        next time, after a backoff); a session being extracted already is skipped.
        """
        if not self.enabled:
            return Extracted()
        return await self._runs.run(
            session_id,
            lambda: self._extract(session_id),
            none=Extracted(),
            failed=Extracted(failed=True),
        )

    async def _extract(self, session_id: str) -> Extracted:
        info = await SessionRepo(self._db).get(session_id)
        if info is None:
            return Extracted()
        user_id = info.user_id
        covered = await self.store.progress(session_id)
        read = functools.partial(
            conversation_after, session_id=session_id, after_seq=covered, limit=MAX_MESSAGES_PER_RUN
        )
        messages = await self._db.read(read)
        result = Extracted(messages=len(messages))
        for chunk in chunk_messages(messages, self._estimator, self._chunk):
            result = await self._chunk_run(user_id, session_id, chunk, result)
        return result

    async def _chunk_run(
        self, user_id: str, session_id: str, chunk: list[StoredMessage], so_far: Extracted
    ) -> Extracted:
        created = reinforced = 0
        users = [m for m in chunk if m.role == "user"]
        if users and not await self._db.read(lambda conn: learning_allowed(conn, user_id)):
            users = []  # /learning off: read past, never learned from later either
        if users:  # a run of assistant messages alone says nothing about the user
            prompt = build_prompt(
                chunk, self._estimator, max_input_tokens=self._chunk, redact=self._redact
            )
            # A provider that can hold its output to the answer's schema does (llama.cpp's
            # grammar): the bundled small model otherwise answered 0 valid lists of 21.
            structured = getattr(self._provider, "complete_json", None)
            if structured is not None:
                answer = await structured(prompt, ANSWER_SCHEMA)
            else:
                answer = await self._provider.complete(prompt)
            found = parse_reply(answer.text)
            if found:
                applied = await self.store.observe(
                    user_id,
                    found,
                    session_id=session_id,
                    message_id=users[-1].id,
                    now=self.clock(),
                )
                created = sum(a.outcome == "created" for a in applied)
                reinforced = len(applied) - created
        await self.store.set_progress(session_id, chunk[-1].seq_order, self.clock())
        return Extracted(
            so_far.messages,
            so_far.calls + bool(users),
            so_far.created + created,
            so_far.reinforced + reinforced,
        )

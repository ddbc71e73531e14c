"""Background reflections and digests: what a session was about, folded per user.

Owned by the task supervisor and never run inside a chat turn. A session *ends* when
it has been idle for ``idle_secs`` (the periodic :meth:`ReflectionTask.check_idle`),
on ``/new`` (the session left behind) and when a summary of it was stored; ``/reflect``
reflects on the current one at once. Each reflection reads the session's messages that
no reflection covers yet (the latest that fit ``max_input_tokens``, with the session's
summary), makes one model call, and stores the checked answer with its provenance
(user, session, message id range), for short sessions too. Then the user's unfolded
reflections are folded by ``digest_fanout`` into a level-1 digest, those into level 2,
up to ``digest_levels``. Digests a purge made stale are rebuilt from what remains by
the periodic check, bottom-up. Failures back off like fact extraction (5 minutes,
doubling).

Secrets are redacted before the model sees the messages and from the answer before it
is stored; an invalid or empty answer is dropped (a content-free log line) and its
messages count as reflected on, so the same junk is not asked for again.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from picobot.config.learning import LearningSettings
from picobot.llm.base import ChatMessage, LLMProvider
from picobot.memory.extraction import MAX_INPUT_TOKENS
from picobot.memory.reflection import checked_answer, digest_prompt, reflection_prompt
from picobot.store.conversation.preferences import learning_allowed
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.learned.digests import (
    Digest,
    DigestStore,
    Provenance,
    children,
    idle_sessions,
    stale_digests,
    unfolded,
    unreflected,
)
from picobot.tasks.session_runs import SessionRuns
from picobot.text.tokens import TokenEstimator

log = logging.getLogger(__name__)

MAX_SESSIONS_PER_CHECK = 20
"""Idle sessions one periodic check reflects on (the rest wait for the next)."""
MAX_MESSAGES_PER_RUN = 400
"""Messages one reflection reads (the latest that fit the input bound reach the model)."""
MAX_REBUILDS_PER_CHECK = 20
"""Stale digests one periodic check rebuilds."""

Spawn = Callable[[str, Coroutine[Any, Any, object]], object]


@dataclass(frozen=True, slots=True)
class Reflected:
    """What one reflection run did."""

    messages: int = 0
    stored: bool = False
    digests: int = 0
    failed: bool = False


class ReflectionTask:
    """Session reflections and per-user digests; see the module docstring."""

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
        self._est = estimator
        self.settings = settings
        # The store's redactor unless told otherwise (what reaches the model, too).
        self._redact: Callable[[str], str] = redact or (lambda text: db.redact(text))
        self.clock = clock
        self._input = max(1, max_input_tokens)
        self.store = DigestStore(db)
        self.spawn: Spawn | None = None
        """Runs a coroutine in the background (the runtime sets the supervisor's)."""
        self._runs = SessionRuns("reflection", lambda: self.clock())

    @property
    def enabled(self) -> bool:
        """Whether learning and reflections are switched on."""
        return self.settings.enabled and self.settings.reflections

    def session_ended(self, session_id: str | None) -> None:
        """Reflect on ``session_id`` in the background (``/new``, a stored summary)."""
        if not self.enabled or session_id is None or self.spawn is None:
            return
        try:
            self.spawn(f"reflect:{session_id}", self.reflect_session(session_id))
        except RuntimeError:  # shutting down: the idle check reflects on it next time
            log.info("reflection of session %s left to the idle check", session_id)

    async def check_idle(self) -> str:
        """Reflect on sessions idle for ``idle_secs`` with unreflected user messages,
        then rebuild stale digests (periodic job)."""
        if not self.enabled:
            return "disabled"
        now = self.clock()
        held = self._runs.failures.all_held(now)
        idle = functools.partial(
            idle_sessions,
            idle_before=now - self.settings.idle_secs,
            limit=MAX_SESSIONS_PER_CHECK + len(held),
        )
        due = [s for s in await self._db.read(idle) if s not in held][:MAX_SESSIONS_PER_CHECK]
        stored = 0
        for sid in due:
            stored += (await self.reflect_session(sid)).stored
        rebuilt = await self.rebuild_stale()
        return f"{stored} reflections of {len(due)} idle sessions, {rebuilt} digests rebuilt"

    async def reflect_session(self, session_id: str) -> Reflected:
        """Reflect on the messages of ``session_id`` no reflection covers; never raises."""
        if not self.enabled:
            return Reflected()
        return await self._runs.run(
            session_id,
            lambda: self._reflect(session_id),
            none=Reflected(),
            failed=Reflected(failed=True),
        )

    async def _reflect(self, session_id: str) -> Reflected:
        info = await SessionRepo(self._db).get(session_id)
        if info is None:
            return Reflected()
        user_id = info.user_id
        read = functools.partial(unreflected, session_id=session_id, limit=MAX_MESSAGES_PER_RUN)
        messages, summary = await self._db.read(read)
        if not any(m.role == "user" for m in messages):
            return Reflected(messages=len(messages))
        source = Provenance(
            session_id, messages[0].id, messages[-1].id, messages[0].seq_order,
            messages[-1].seq_order,
        )  # fmt: skip
        if not await self._db.read(lambda conn: learning_allowed(conn, user_id)):
            # /learning off: the range is covered by an empty row (as junk is), so it
            # is never reflected on, not even after learning is on again.
            await self.store.add_reflection(user_id, source, "", 0, now=self.clock())
            return Reflected(len(messages))
        cfg = self.settings
        prompt = reflection_prompt(
            messages,
            summary,
            self._est,
            max_input_tokens=self._input,
            max_words=cfg.reflection_max_words,
            redact=self._redact,
        )
        text = await self._answer(prompt, "reflection", cfg.reflection_max_words)
        # Junk still covers its messages: the same range is not asked about again.
        stored_text = text if text is not None else ""
        tokens = self._est.estimate(stored_text)
        await self.store.add_reflection(user_id, source, stored_text, tokens, now=self.clock())
        digests = await self.fold(user_id) if text is not None else 0
        return Reflected(len(messages), text is not None, digests)

    async def _answer(self, prompt: list[ChatMessage], kind: str, max_words: int) -> str | None:
        answer = await self._provider.complete(prompt)
        bound = self.settings.digest_max_tokens if kind == "digest" else 10 * max_words
        # What the model was told besides the quoted data: an answer repeating it is junk.
        told = [m.content for m in prompt if m.role == "system"]
        told += [m.content.rsplit("</data>", 1)[-1] for m in prompt if m.role == "user"]
        # Checked, then redacted and checked again: the model may repeat or make up a
        # secret, and a redaction may leave too little. Both checks see the whole answer:
        # a cut one may have lost the parts its format requires.
        text: str | None = None
        for step in (str, self._redact):
            text = checked_answer(
                step(answer.text),
                kind,
                max_words=max_words,
                estimator=self._est,
                max_tokens=bound,
                instructions=told,
            )
            if text is None:
                return None
        return text

    def _digest_words(self) -> int:
        # A generous word bound; the token bound is what holds a digest's size.
        return max(20, self.settings.digest_max_tokens)

    async def fold(self, user_id: str) -> int:
        """Fold ``user_id``'s unfolded rows level by level; how many digests were made."""
        made = 0
        fanout = self.settings.digest_fanout
        for level in range(1, self.settings.digest_levels + 1):
            while True:
                batch = await self._db.read(
                    functools.partial(unfolded, user_id=user_id, level=level - 1, limit=fanout)
                )
                if len(batch) < fanout:
                    break
                text = await self._fold_text(batch, level)
                if text is None:
                    return made  # junk: tried again at the next fold
                did = await self.store.add_digest(
                    user_id,
                    level,
                    batch,
                    text,
                    self._est.estimate(text),
                    now=self.clock(),
                )
                made += did is not None
        return made

    async def _fold_text(self, sources: list[Digest], level: int) -> str | None:
        prompt = digest_prompt(
            [d.text for d in sources],
            level,
            self._est,
            max_input_tokens=self._input,
            max_words=self._digest_words(),
            redact=self._redact,
        )
        return await self._answer(prompt, "digest", self._digest_words())

    async def rebuild_stale(self) -> int:
        """Rebuild (or delete, when nothing is left below) digests a purge made stale.

        Bottom-up: a digest waits while any row below it is stale (rebuilt first, lower
        levels come first), so it is never rebuilt from part of its sources. The write
        checks that the rows read are still its children, unchanged (see
        :meth:`DigestStore.rebuilt`).
        """
        done = 0
        for digest in await self._db.read(lambda c: stale_digests(c, MAX_REBUILDS_PER_CHECK)):
            below = await self._db.read(functools.partial(children, digest_id=digest.id))
            if not below:
                done += await self.store.drop_empty(digest, now=self.clock())
                continue
            if any(d.stale or not d.text for d in below):
                continue  # its sources first; it waits for the next check
            try:
                text = await self._fold_text(below, digest.level)
            except Exception:
                log.exception("rebuilding digest %d failed", digest.id)
                continue
            if text is not None:
                tokens = self._est.estimate(text)
                done += await self.store.rebuilt(digest, below, text, tokens, now=self.clock())
        return done

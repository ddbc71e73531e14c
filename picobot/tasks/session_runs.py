"""One background run per session at a time, with a backoff after it fails.

Shared by fact extraction and session reflection: both read a session's unread
messages and ask the model about them, and neither may run twice at once on one
session or hammer a failing model.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from picobot.backoff import FailureBackoff
from picobot.store.conversation.messages import SessionGone

log = logging.getLogger(__name__)

T = TypeVar("T")


class SessionRuns:
    """Runs of one kind (``what``, for the log), at most one per session at a time."""

    def __init__(self, what: str, clock: Callable[[], float]) -> None:
        self._what = what
        self._clock = clock
        self._busy: set[str] = set()
        self.failures = FailureBackoff()
        """Sessions whose last run failed, held back until their backoff ends."""

    async def run(
        self, session_id: str, work: Callable[[], Awaitable[T]], *, none: T, failed: T
    ) -> T:
        """``work()``, or ``failed`` when a run of the session is under way or it raises
        (the session is then held back), or ``none`` when the session is gone; never
        raises."""
        if session_id in self._busy:
            return failed
        self._busy.add(session_id)
        try:
            done = await work()
        except SessionGone:
            return none
        except Exception:
            delay = self.failures.failed(session_id, self._clock())
            log.exception(
                "%s of session %s failed; next try in %.0fs", self._what, session_id, delay
            )
            return failed
        else:
            self.failures.succeeded(session_id)
            return done
        finally:
            self._busy.discard(session_id)

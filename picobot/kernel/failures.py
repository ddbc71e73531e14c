"""What a user is told when a turn or a command fails, and the wrapper of command steps
that says it: the kernel never shows an exception's text, only these (or a UserError's)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

from picobot.errors import StoreUnavailable, UserError
from picobot.messages import Identity, Outbound, error

log = logging.getLogger("picobot.kernel.kernel")  # the kernel's log, where these were
T = TypeVar("T")

MODEL_FAILED = (
    "Sorry, I could not get an answer from the model just now. "
    "Your message was saved; please try again."
)
INTERNAL_FAILED = (
    "Sorry, something went wrong on my side. Your message was saved; please try again."
)
COMMAND_FAILED = "Sorry, something went wrong on my side; please try again."
SESSION_GONE = "This session was deleted meanwhile, so nothing more is saved in it."
REPLY_STORE_FAILED = (
    "Sorry, my storage failed while saving my answer. Your message was saved; "
    "please try again shortly."
)
STORE_FAILED = (
    "Sorry, my storage is unavailable right now, so your message was not saved. "
    "Please try again shortly."
)


async def safely(
    identity: Identity,
    session_id: str | None,
    work: Awaitable[T],
) -> T | list[Outbound]:
    """Await a command-like step; UserError is shown, anything else logged generically."""
    try:
        return await work
    except UserError as exc:
        return [error(str(exc), code="command", session_id=session_id)]
    except StoreUnavailable:
        log.exception("store unavailable for %s", identity.user_id)
        return [error(STORE_FAILED, code="store_unavailable", session_id=session_id)]
    except Exception:
        log.exception("command step failed for %s", identity.user_id)
        # Commands are not stored, so do not claim "your message was saved".
        return [error(COMMAND_FAILED, code="internal", session_id=session_id)]

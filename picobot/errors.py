"""The project's exception hierarchy.

Only :class:`UserError` messages are ever shown to a chat user verbatim; every other
exception is logged with its traceback and the user sees a generic line instead.
"""

from __future__ import annotations


class PicobotError(Exception):
    """Base class of every error PicoBot raises on purpose."""


class UserError(PicobotError):
    """An error whose message is written for the user and shown verbatim."""


class ConfigError(PicobotError):
    """The configuration is broken; the message names the file and the bad keys."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = problems or []

    def __str__(self) -> str:
        head = super().__str__()
        if not self.problems:
            return head
        return head + "\n" + "\n".join(f"  - {p}" for p in self.problems)


class AccessDenied(UserError):
    """The caller lacks the permission for what they asked; safe to show."""


class StoreUnavailable(PicobotError):
    """The database cannot be used right now (locked, read-only, full, missing)."""


class LLMError(PicobotError):
    """The language model could not produce an answer (unreachable, failing, missing)."""


UNREADABLE_JSON: tuple[type[Exception], ...] = (ValueError, RecursionError)
"""What ``json.loads`` raises for input it cannot read: ValueError for text that is not
JSON (UnicodeDecodeError, for bytes that are not UTF-8, is one), RecursionError for
nesting too deep for the decoder (``[[[[...``). Every reader of client JSON catches
these, so a hostile body is a 400, never a crash with a traceback."""

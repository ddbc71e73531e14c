"""What every ``picobot`` subcommand module shares: exit statuses and the error line.

Its own module so that :mod:`picobot.cli.main` and the modules it imports its subcommands
(``data``, ``memories``, ``ops``, ``purge``) can all use it.
"""

from __future__ import annotations

import os
import sys

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a program whose reader went away."""
PROG = "picobot"


def fail(message: str) -> None:
    """Print ``picobot: error: <message>`` on stderr (the caller returns the status)."""
    print(f"{PROG}: error: {message}", file=sys.stderr)


def silence_stdout() -> None:
    """Point standard output at /dev/null after its reader went away.

    So that the interpreter's final flush of what is still buffered does not fail
    again with an "Exception ignored" message (the recipe in Python's ``signal`` docs).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real descriptor behind stdout (tests, embedding)
        pass
    finally:
        os.close(devnull)

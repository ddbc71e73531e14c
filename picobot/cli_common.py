"""What every ``picobot`` subcommand module shares: exit statuses and the error line.

Its own module so that :mod:`picobot.cli` and the modules it imports its subcommands
from (``cli_data``, ``cli_memories``, ``cli_ops``, ``cli_purge``) can all use it.
"""

from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
PROG = "picobot"


def fail(message: str) -> None:
    """Print ``picobot: error: <message>`` on stderr (the caller returns the status)."""
    print(f"{PROG}: error: {message}", file=sys.stderr)

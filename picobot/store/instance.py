"""Who an instance is among those that share one store."""

from __future__ import annotations

import os
import secrets


def new_instance_id() -> str:
    """A fresh id for one runtime: its process id and 48 random bits, so ids are never
    reused after a restart and two runtimes of one process (tests, tools) differ."""
    return f"{os.getpid()}-{secrets.token_hex(6)}"

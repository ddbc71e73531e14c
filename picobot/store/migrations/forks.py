"""The migration of fork points; see picobot.store.conversation.branches."""

from __future__ import annotations

from picobot.store.connection import AsyncConnection
from picobot.store.migrations.script import run_script


async def m022_fork_points(conn: AsyncConnection) -> None:
    """Where each fork left its parent, and whether it replaced the parent's message there.

    ``sessions.fork_seq``: the parent's messages with ``seq_order < fork_seq`` are the
    ones the fork was started with (NULL: not a fork, or a fork made before this column).
    ``sessions.fork_edit``: 1 when ``/edit`` made the fork, replacing the parent's message
    ``fork_seq`` and what followed it; the branch's prompt leaves those out (see
    :func:`picobot.store.conversation.branches.hidden_from`). Holds no content.
    """
    await run_script(
        conn,
        """
        ALTER TABLE sessions ADD COLUMN fork_seq INTEGER;
        ALTER TABLE sessions ADD COLUMN fork_edit INTEGER NOT NULL DEFAULT 0
            CHECK (fork_edit IN (0, 1));
        """,
    )

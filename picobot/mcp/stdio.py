"""``picobot mcp``: the memory over stdio for a local MCP client (Claude Desktop style).

The caller is the configured local user, ``tui:<[channels.tui] user_name>``: the same
user as the terminal UI, since whoever can start this process can read that user's
data file anyway. stdout carries the protocol only; logs go to PicoBot's log file.
"""

from __future__ import annotations

from picobot.config.settings import Settings
from picobot.mcp.access import MemoryAccess
from picobot.mcp.server import build_server
from picobot.runtime import open_database


def local_user(settings: Settings) -> str:
    """The user id of the stdio server: the terminal UI's."""
    return f"tui:{settings.channels.tui.user_name}"


async def run_stdio(settings: Settings) -> int:
    """Serve MCP on stdin/stdout until the client closes them; return the exit status."""
    user = local_user(settings)
    async with open_database(settings) as db:
        server = build_server(MemoryAccess(settings, db), lambda ctx: user)
        await server.run_stdio_async()
    return 0

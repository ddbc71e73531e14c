"""PicoBot's memory as an MCP server (the official ``mcp`` SDK; docs/integrations.md).

A front end like the channels: it authenticates a caller (the configured local user on
stdio, an API key over streamable HTTP), builds the caller's :class:`ToolContext` with
the kernel's grants, and calls the same operations the chat uses through thin adapters
(:mod:`picobot.mcp.access`). It holds no SQL and no ranking of its own.
"""

from __future__ import annotations

import importlib

from picobot.errors import PicobotError

INSTALL_HINT = "pip install 'picobot[mcp]'"


def require_sdk() -> None:
    """Raise PicobotError with the install line when the ``mcp`` SDK (the extra) is missing."""
    try:
        importlib.import_module("mcp.server.mcpserver")
    except ImportError:
        raise PicobotError(
            f"the MCP server needs the mcp extra, which is not installed: {INSTALL_HINT}"
        ) from None

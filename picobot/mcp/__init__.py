"""PicoBot's memory as an MCP server (the official ``mcp`` SDK; docs/integrations.md).

A front end like the channels: it authenticates a caller (the configured local user on
stdio, an API key over streamable HTTP), builds the caller's :class:`ToolContext` with
the kernel's grants, and calls the same operations the chat uses through thin adapters
(:mod:`picobot.mcp.access`). It holds no SQL and no ranking of its own.
"""

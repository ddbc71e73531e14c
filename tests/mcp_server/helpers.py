"""What the MCP tests check in a client's answers."""

from __future__ import annotations

import re

from mcp import Client
from mcp_types import CallToolResult, TextContent

TOOLS = {"search_memory", "remember", "list_notes", "list_facts", "forget"}
TOKEN = re.compile(r'confirmation="([^"]+)"')


def text(result: CallToolResult) -> str:
    """The text of a tool's answer."""
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(client: Client, name: str, **args: object) -> str:
    """Call a tool that must succeed; its text."""
    result = await client.call_tool(name, dict(args))
    assert not result.is_error, text(result)
    return text(result)


async def refused(client: Client, name: str, **args: object) -> str:
    """Call a tool that must fail; its message."""
    result = await client.call_tool(name, dict(args))
    assert result.is_error, text(result)
    return text(result)


def token_in(plan: str) -> str:
    """The confirmation token a first forget call returned."""
    found = TOKEN.search(plan)
    assert found is not None, plan
    return found.group(1)


async def remember_list_forget(client: Client, word: str) -> None:
    """The note round trip every transport must pass: remember, list, forget in two steps."""
    assert "Saved" in await call(client, "remember", key="tea", content=f"likes {word} tea")
    listed = await call(client, "list_notes")
    assert "tea" in listed and word in listed
    plan = await call(client, "forget", note="tea")
    assert "1 note" in plan and "Nothing is deleted yet" in plan
    # Not gone until confirmed.
    assert word in await call(client, "list_notes")
    token = token_in(plan)
    assert "Forgot note 'tea'" in await call(client, "forget", confirmation=token)
    assert word not in await call(client, "list_notes")
    # Single use: the same token again deletes nothing and says so.
    assert "no pending forget" in await refused(client, "forget", confirmation=token)

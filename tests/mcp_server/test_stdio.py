"""``picobot mcp`` over stdio, driven by the SDK's own client in a real subprocess."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

import picobot
from picobot.cli.main import main
from tests.mcp_server.conftest import ALICE_WORD, BOB_WORD, seed
from tests.mcp_server.helpers import TOOLS, call, refused, remember_list_forget, text

ROOT = Path(picobot.__file__).parent.parent


def stdio_client(config: Path, data_dir: Path) -> Client:
    env = {
        "PYTHONPATH": str(ROOT),
        "PICOBOT_DATA__DIR": str(data_dir),
        "PICOBOT_SECRETS_DIR": "",
        "HOME": str(data_dir.parent / "home"),
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "picobot", "--config", str(config), "mcp"],
        env=env,
        cwd=str(data_dir.parent),
    )
    return Client(params)


async def test_stdio_serves_the_configured_local_user(tmp_path: Path, data_dir: Path) -> None:
    await seed(data_dir, "tui:alice", "tui:bob")
    config = tmp_path / "config.toml"
    config.write_text('[channels.tui]\nuser_name = "alice"\n', encoding="utf-8")
    async with stdio_client(config, data_dir) as client:
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} == TOOLS
        forget = next(t for t in tools.tools if t.name == "forget")
        assert forget.annotations is not None and forget.annotations.destructive_hint
        # Alice's history is found; bob's, in the same file, is not hers to search.
        assert ALICE_WORD in await call(client, "search_memory", query=ALICE_WORD)
        assert await call(client, "search_memory", query=BOB_WORD) == "no matches"
        await remember_list_forget(client, "oolong")
        # No argument names another user.
        result = await client.call_tool("list_notes", {"user_id": "tui:bob"})
        assert result.is_error or "tui:bob" not in text(result)
        assert "No learned facts" in await call(client, "list_facts")
        await call(client, "remember", key="pet", content="a cat")
        notes = await client.read_resource("picobot://notes")
        assert "a cat" in str(notes.contents[0])
        assert "reserved" in await refused(client, "remember", key="system_x", content="y")


def test_without_the_sdk_the_command_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A None entry makes the import fail as for a package that is not installed.
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
    assert main(["mcp"]) == 1
    assert "pip install 'picobot[mcp]'" in capsys.readouterr().err

"""Erasure of what came in over MCP: a note written by an MCP client, and the events of
its calls, leave no byte on disk after a purge of its user; another user's stay."""

from __future__ import annotations

import random

from mcp import Client

from picobot.config.settings import DataSettings, Settings
from picobot.mcp.access import MemoryAccess
from picobot.mcp.server import build_server
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeStore
from picobot.store.retrieval.search import user_token
from tests.privacy.test_erasure import assert_erased, new_marker


async def write_note(db: Database, user_id: str, marker: str) -> None:
    """remember, list and search through the SDK's client, as ``user_id``."""
    settings = Settings(data=DataSettings(dir=str(db.path.parent)))
    server = build_server(MemoryAccess(settings, db), lambda ctx: user_id)
    async with Client(server) as client:
        saved = await client.call_tool("remember", {"key": "secret", "content": marker})
        assert not saved.is_error
        listed = await client.call_tool("list_notes", {})
        assert marker in str(listed.content)
        found = await client.call_tool("search_memory", {"query": marker})
        assert marker in str(found.content)


async def test_a_note_written_over_mcp_is_erased_with_its_user(db: Database) -> None:
    rng = random.Random(37)
    alice = f"ws:alice{new_marker(rng)}"
    # The FTS owner token spells the user id in hex.
    gone, kept = [new_marker(rng), alice, user_token(alice)], [new_marker(rng)]
    await write_note(db, alice, gone[0])
    await write_note(db, "ws:bob", kept[0])

    counts = await PurgeStore(db).delete_user(alice, batch_size=5)
    assert counts.memories == 1
    await erase_residue(db)

    await assert_erased(db, gone, kept)
    row = await db.fetchone("SELECT COUNT(*) FROM events WHERE user_id = ?", (alice,))
    assert row is not None and row[0] == 0

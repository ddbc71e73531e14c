"""Tool records and webhook queue rows are sealed with their user's key.

A real runtime (with its key store) behind a real webhook server on loopback: a tool
call, replies the platform refused (queued for a retry) and a message still waiting
for its turn put a user's words in ``tool_records``, ``outbound_queue`` and
``webhook_inbox``. They read back through the store, no file of the data directory
holds them in clear, and once the user is purged (``/purge user``, "y") a copy of the
database taken before reads them as erased beside the live key store, as
tests/cli/test_backup.py shows for message texts.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.llm.base import ToolCall
from picobot.llm.scripted import ScriptedTurn
from picobot.runtime import Runtime
from picobot.store.backup import backup_database
from picobot.store.keys.keyring import KEY_STORE_FILE
from picobot.store.keys.master import DEFAULT_KEY_FILE
from picobot.store.keys.sealing import ERASED
from tests.channels.gated import GatedProvider
from tests.channels.webhook.conftest import PlatformAPI, Webhooks, message, post_generic
from tests.privacy.test_erasure import new_marker, scan
from tests.sealed import opened, scan_bytes, sealed_tails

WAIT = 30.0
ALICE, BOB = "generic:alice", "generic:bob"
# The user's words per (table, column) as the store reads them, opened.
OPENED = {
    "arguments": "SELECT picobot_open(arguments) FROM tool_records WHERE user_id = ?",
    "result": "SELECT picobot_open(result) FROM tool_records WHERE user_id = ?",
    "inbox": "SELECT picobot_open(text) FROM webhook_inbox WHERE user_id = ? AND text <> ''",
    "replies": "SELECT picobot_open(text) FROM outbound_queue WHERE user_id = ?",
}


@pytest.fixture
def provider() -> GatedProvider:
    """The model: echoes, holding a turn whose message says "held" until the gate opens."""
    return GatedProvider(only="held")


def read_opened(conn: sqlite3.Connection, user_id: str) -> dict[str, list[str]]:
    """Each kind of sealed row of ``user_id``, opened (``conn`` has picobot_open)."""
    return {k: [str(r[0]) for r in conn.execute(sql, (user_id,))] for k, sql in OPENED.items()}


async def test_tool_records_and_queued_texts_are_sealed_and_erased_with_the_key(
    webhooks: Webhooks,
    runtime: Runtime,
    provider: GatedProvider,
    generic: GenericPlatform,
    platform_api: PlatformAPI,
    client: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    rng = random.Random("sealed-rows")
    word, asked, found, bobs, held = (new_marker(rng) for _ in range(5))
    bot = await webhooks.start(
        generic, max_attempts=5, backoff_base_secs=3600, backoff_cap_secs=3600
    )
    url = bot.url("generic")
    sent = 0

    async def say(text: str, user: str = "alice") -> None:
        nonlocal sent
        sent += 1
        msg = message(text, f"m{sent}", user=user, chat=f"chat-{user}")
        assert (await post_generic(client, url, msg))[0] == 200

    async def processed(n: int) -> None:
        await asyncio.wait_for(bot.server.wait_for(lambda s: s.processed == n), WAIT)

    # Every reply is refused and retried only in an hour: the queue keeps its text.
    platform_api.fail(10_000)
    await say(f"my word is {word}")
    await processed(1)
    provider.add(
        ScriptedTurn(tool_calls=(ToolCall("c1", "memory_search", json.dumps({"query": word})),)),
        f"it is {found}",
    )
    await say(f"what was my word {asked}")
    await processed(2)  # the scripted turns are Alice's
    await say(f"bob says {bobs}", user="bob")
    await processed(3)
    await say(f"held {held}")
    await provider.entered.wait()  # accepted and stored; its turn waits at the model
    assert bot.server.stats.delivered == 0

    # Readable through the store: the tool's arguments and result, the queued replies,
    # the waiting message.
    store = await runtime.db.read(lambda conn: read_opened(conn, ALICE))
    assert [word in a for a in store["arguments"]] == [True]
    assert [word in r for r in store["result"]] == [True]
    assert store["inbox"] == [f"held {held}"]
    assert [r.startswith("You said: my word is") for r in store["replies"]] == [True, False]
    assert f"it is {found}" in store["replies"]
    [waiting] = await bot.store.pending_inbox(10, ["generic"])
    assert waiting.text == f"held {held}"

    # In the files, only ciphertext: no marker in clear, every sealed row found as stored.
    data_dir = runtime.db.path.parent
    await runtime.db.checkpoint()
    markers = [word, asked, found, bobs, held]
    assert scan(data_dir, markers) == {}
    tails = await sealed_tails(runtime.db, markers)
    assert set(tails) == set(markers)
    assert scan_bytes(data_dir, tails) == set(markers)
    beside = tmp_path / "beside"
    beside.mkdir()
    backup_database(runtime.db.path, beside / "conversations.db")
    assert scan(beside, markers) == {}

    provider.gate.set()
    await processed(4)
    await say("/purge user")
    await processed(5)
    await say("y")
    await processed(6)
    live = await runtime.db.read(lambda conn: read_opened(conn, ALICE))
    assert live == {"arguments": [], "result": [], "inbox": [], "replies": []}

    # The copy taken before the purge, beside the live key store: Alice's rows are
    # there and read as erased; Bob's still read.
    assert runtime.db.sealer.ring is not None
    runtime.db.sealer.ring.backup_to(beside / KEY_STORE_FILE)
    shutil.copy2(data_dir / DEFAULT_KEY_FILE, beside / DEFAULT_KEY_FILE)
    conn = sqlite3.connect(beside / "conversations.db")
    try:
        with opened(conn, beside):
            restored = read_opened(conn, ALICE)
            kept = read_opened(conn, BOB)
    finally:
        conn.close()
    assert {k: len(v) for k, v in restored.items()} == {
        "arguments": 1,
        "result": 1,
        "inbox": 1,
        "replies": 2,
    }
    assert {t for texts in restored.values() for t in texts} == {ERASED}
    assert kept["replies"] == [f"You said: bob says {bobs}"]

"""/export from the chat: a 0600 file in the terminal UI, a document event on the
messaging platforms with a file API, a clear answer elsewhere; the files go with a user
purge and with retention."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.runtime import Runtime, open_runtime
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.export_files import delete_files_before, export_dir
from picobot.store.erasure.purge import PurgeStore
from picobot.store.keys.sealed_files import MAGIC, read_sealed
from picobot.store.keys.sealing import Sealer
from tests.privacy.test_erasure import scan

ALICE = Identity("tui", "tui:alice", "local")
BOB = Identity("tui", "tui:bob", "local")
PLATFORM = Identity("whatsapp", "whatsapp:15550001@s.whatsapp.net", "15550001")
GENERIC = Identity("generic", "generic:ann", "c1")
MARKER = "marker7f3a9c21e5b84d60x"


async def say(rt: Runtime, who: Identity, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(who, text))]


def settings(tmp_path: Path) -> Settings:
    return Settings(data={"dir": str(tmp_path / "data")}, llm={"provider": "scripted"})


def private_export(name: str, data: Path, sealer: Sealer | None = None) -> str:
    """The text of the export file at ``name``, checked to be a 0600 file of ``data``;
    with ``sealer``, checked to be sealed and opened with it."""
    path = Path(name)
    assert path.parent == export_dir(data)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    if sealer is None:
        return path.read_text(encoding="utf-8")
    assert path.read_bytes().startswith(MAGIC)
    return read_sealed(path, sealer).decode("utf-8")


def path_in(answer: str) -> Path:
    return Path(answer.split(" is in ")[1].split(" (JSON Lines")[0])


async def test_tui_export_writes_the_callers_data_to_a_private_file(tmp_path: Path) -> None:
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider(["ok"] * 5)) as rt:
        await say(rt, ALICE, f"my locker code is {MARKER}")
        await say(rt, BOB, "bob's own words")
        answer = (await say(rt, ALICE, "/export"))[-1].text
        path = path_in(answer)
        assert path.parent == export_dir(tmp_path / "data")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert "tui:alice" not in path.name  # the name holds a hash, not the id
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert records[0] == {**records[0], "type": "export_header", "user_id": "tui:alice"}
        texts = [r.get("content", "") for r in records if r["type"] == "message"]
        assert any(MARKER in t for t in texts)
        assert not any("bob's own words" in t for t in texts)
        nothing = (await say(rt, Identity("tui", "tui:nobody", "local"), "/export"))[-1].text
        assert nothing == "Nothing is stored about you yet."


async def test_channels_without_files_say_how_to_get_the_export(tmp_path: Path) -> None:
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider(["ok"] * 5)) as rt:
        for who in (GENERIC, Identity("api", "api:key1", "c1")):
            await say(rt, who, "hello")
            [answer] = await say(rt, who, "/export")
            assert answer.kind is OutboundKind.NOTICE and answer.path is None
            assert answer.text.startswith("This chat cannot receive files")
            assert "picobot export --user" in answer.text
        assert not export_dir(tmp_path / "data").exists()


async def test_messaging_platforms_get_a_document_of_the_callers_data(tmp_path: Path) -> None:
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider(["ok"] * 5)) as rt:
        await say(rt, PLATFORM, f"my locker code is {MARKER}")
        await say(rt, BOB, "bob's own words")
        [event] = await say(rt, PLATFORM, "/export")
        assert event.kind is OutboundKind.DOCUMENT and event.path is not None
        assert event.text.startswith("Everything stored about you, as JSON Lines: 1 sessions")
        body = private_export(event.path, tmp_path / "data", rt.db.sealer)
        assert MARKER in body and "bob's own words" not in body
        assert json.loads(body.splitlines()[0])["user_id"] == PLATFORM.user_id


async def test_a_user_purge_and_retention_delete_the_export_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider(["ok"] * 9)) as rt:
        await say(rt, ALICE, f"my locker code is {MARKER}")
        await say(rt, BOB, "bob says hi")
        alice_file = path_in((await say(rt, ALICE, "/export"))[-1].text)
        bob_file = path_in((await say(rt, BOB, "/export"))[-1].text)
        assert scan(data, [MARKER]) != {}
        await PurgeStore(rt.db).delete_user("tui:alice")
        await erase_residue(rt.db)
        assert not alice_file.exists() and bob_file.exists()
        assert scan(data, [MARKER]) == {}
        # Retention: a file older than a day goes even when the data it holds stays.
        old = time.time() - 2 * 86400
        os.utime(bob_file, (old, old))
        assert delete_files_before(data, cutoff_ts=0.0) == 1
        assert not bob_file.exists()


async def test_a_group_chat_gets_no_document_of_anyone(tmp_path: Path) -> None:
    # Everyone in a group would receive the file: only a one-to-one chat gets it.
    groups = [
        Identity("telegram", "telegram:42", "-1001234567890"),  # a supergroup
        Identity("slack", "slack:T1:U42", "C0GENERAL"),  # a channel
        Identity("slack", "slack:T1:U42", "G0PRIVATEGROUP"),  # a private channel, a group DM
    ]
    async with open_runtime(settings(tmp_path), provider=ScriptedProvider(["ok"] * 9)) as rt:
        for who in groups:
            await say(rt, who, f"my locker code is {MARKER}")
            [answer] = await say(rt, who, "/export")
            assert answer.kind is OutboundKind.NOTICE and answer.path is None
            assert "send /export in a private chat with me" in answer.text
        assert not export_dir(tmp_path / "data").exists()
        for who in (
            Identity("telegram", "telegram:42", "42"),
            Identity("slack", "slack:T1:U42", "D0DIRECT"),
        ):
            [event] = await say(rt, who, "/export")
            assert event.kind is OutboundKind.DOCUMENT

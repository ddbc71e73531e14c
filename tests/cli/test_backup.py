"""``picobot backup``, ``restore`` and ``keys``: backups that forget purged users."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from picobot.cli.main import main
from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Inbound
from picobot.runtime import open_database, open_runtime
from picobot.store.backup import KEY_BACKUP_PREFIX, stamp
from picobot.store.keys.keyring import KEY_STORE_FILE
from picobot.store.keys.master import DEFAULT_KEY_FILE
from picobot.store.keys.sealing import ERASED
from tests.cli.test_purge import ALICE, BOB, seed_with
from tests.privacy.test_erasure import scan
from tests.sealed import opened, scan_bytes, sealed_tails

DATA = Path("data")


def opened_by_user(data_dir: Path, sql: str) -> list[tuple[str, str]]:
    """``sql``'s (user id, text) rows, read with ``data_dir``'s key store."""
    conn = sqlite3.connect(data_dir / "conversations.db")
    try:
        with opened(conn, data_dir):
            return [(str(user), str(text)) for user, text in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def texts_by_user(data_dir: Path) -> dict[str, list[str]]:
    """Every message's text, opened with ``data_dir``'s key store, by user."""
    found: dict[str, list[str]] = {}
    for user, text in opened_by_user(
        data_dir,
        "SELECT s.user_id, picobot_open(m.content) FROM messages m"
        " JOIN sessions s ON s.id = m.session_id ORDER BY m.id",
    ):
        found.setdefault(user, []).append(text)
    return found


def names_by_user(data_dir: Path) -> dict[str, set[str]]:
    """Every note's name and fact's subject, opened with ``data_dir``'s key store, by user."""
    rows = opened_by_user(
        data_dir,
        "SELECT user_id, picobot_open(key) FROM user_memories"
        " UNION ALL SELECT user_id, picobot_open(subject) FROM facts",
    )
    return {user: {name for who, name in rows if who == user} for user, _ in rows}


def only_file(directory: Path, pattern: str) -> Path:
    (path,) = directory.glob(pattern)
    return path


def beside_the_live_keys(backup: Path, beside: Path) -> Path:
    """``backup`` restored into ``beside`` with a copy of the live key store."""
    beside.mkdir()
    shutil.copyfile(backup, beside / "conversations.db")
    for name in (KEY_STORE_FILE, DEFAULT_KEY_FILE):
        shutil.copy2(DATA / name, beside / name)
    return beside


def test_a_backup_taken_before_a_purge_never_reveals_the_purged_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_with(DATA, "secret word zq{user_id}marker")
    assert main(["backup", "--to", "backups"]) == 0
    out = capsys.readouterr().out
    backup = only_file(Path("backups"), "picobot-*.db")
    assert str(backup) in out and "key store:" in out
    # The backup is sealed: no marker of anyone is in its bytes.
    assert scan(Path("backups"), ["zqtui:alicemarker", "zqtui:bobmarker"]) == {}
    assert main(["purge", "user", "tui:alice", "--yes"]) == 0
    # The backup restored beside the live store, read with the live keys.
    restored = texts_by_user(beside_the_live_keys(backup, tmp_path / "beside"))
    assert restored["tui:alice"] and set(restored["tui:alice"]) == {ERASED}
    assert "secret word zqtui:bobmarker" in restored["tui:bob"]


def seed_names(data_dir: Path) -> dict[str, bytes]:
    """Alice and bob each keep a note and have a fact, named with their own marker."""

    async def go() -> dict[str, bytes]:
        settings = Settings(data={"dir": str(data_dir)})
        async with open_runtime(settings, provider=ScriptedProvider()) as rt:
            for who in (ALICE, BOB):
                name = who.user_id.removeprefix("tui:")
                async for _ in rt.kernel.handle(Inbound(who, f"/remember zqnote{name}: tea")):
                    pass
                await rt.services.facts.create(
                    who.user_id,
                    subject=f"zqsubject{name}",
                    category="personal",
                    text="drinks tea",
                    confidence=None,
                    actor="cli:test",
                )
            sealed = await sealed_tails(rt.db, ["zqnotealice", "zqsubjectalice"])
            await rt.db.checkpoint()
        return sealed

    return asyncio.run(go())


def test_note_names_and_fact_subjects_are_sealed_and_erased_with_their_user(
    tmp_path: Path,
) -> None:
    sealed = seed_names(DATA)
    markers = ["zqnotealice", "zqsubjectalice", "zqnotebob", "zqsubjectbob"]
    assert set(sealed) == {"zqnotealice", "zqsubjectalice"}  # stored sealed
    assert names_by_user(DATA)["tui:bob"] == {"zqnotebob", "zqsubjectbob"}
    assert main(["backup", "--to", "backups"]) == 0
    backup = only_file(Path("backups"), "picobot-*.db")
    # Neither the live files nor the backup hold a name in clear; the backup holds
    # alice's sealed names.
    assert scan(DATA, markers) == {} and scan(Path("backups"), markers) == {}
    assert scan_bytes(Path("backups"), sealed) == set(sealed)
    assert main(["purge", "user", "tui:alice", "--yes"]) == 0
    assert scan_bytes(DATA, sealed) == set()  # gone from the live files
    restored = names_by_user(beside_the_live_keys(backup, tmp_path / "beside"))
    assert restored["tui:alice"] == {ERASED}
    assert restored["tui:bob"] == {"zqnotebob", "zqsubjectbob"}


def test_restore_puts_a_backup_back_and_purged_users_stay_erased(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_with(DATA, "first words of {user_id}")
    assert main(["backup", "--to", "backups"]) == 0
    backup = only_file(Path("backups"), "picobot-*.db")
    seed_with(DATA, "later words of {user_id}")
    assert main(["purge", "user", "tui:alice", "--yes"]) == 0
    capsys.readouterr()
    assert main(["restore", str(backup)]) == 1  # refused without --yes
    assert "--yes" in capsys.readouterr().err
    assert main(["restore", str(backup), "--yes"]) == 0
    assert "deleted the rows of 1 user(s) purged since the backup" in capsys.readouterr().out
    restored = texts_by_user(DATA)
    assert "first words of tui:bob" in restored["tui:bob"]
    assert not any("later" in t for t in restored["tui:bob"])  # the backup's state
    # Alice's rows came back unreadable and were deleted; her key is not resurrected.
    assert "tui:alice" not in restored
    seed_with(DATA, "new words of {user_id}")
    again = texts_by_user(DATA)["tui:alice"]
    assert again[0] == "new words of tui:alice" and ERASED not in again


def test_restore_refuses_a_file_that_is_not_a_backup(capsys: pytest.CaptureFixture[str]) -> None:
    seed_with(DATA, "hello {user_id}")
    Path("junk.db").write_bytes(b"not a database at all" * 100)
    assert main(["restore", "junk.db", "--yes"]) == 1
    assert "junk.db" in capsys.readouterr().err
    assert "hello tui:bob" in texts_by_user(DATA)["tui:bob"]


def test_restore_refuses_a_backup_sealed_under_another_key_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_with(DATA, "kept words of {user_id}")
    assert main(["backup", "--to", "backups"]) == 0
    backup = only_file(Path("backups"), "picobot-*.db")
    foreign = Path("foreign.db")
    shutil.copyfile(backup, foreign)
    conn = sqlite3.connect(foreign)
    with conn:
        conn.execute("UPDATE store_meta SET value = 'feedfacefeedface' WHERE name = 'key_store'")
    conn.close()
    seed_with(DATA, "newer words of {user_id}")
    capsys.readouterr()
    assert main(["restore", str(foreign), "--yes"]) == 1
    err = capsys.readouterr().err
    assert "feedfacefeedface" in err and "nothing was replaced" in err
    # The live database is the one from before the attempt, newer rows included.
    assert "newer words of tui:bob" in texts_by_user(DATA)["tui:bob"]
    # The backup sealed under this key store is restored.
    assert main(["restore", str(backup), "--yes"]) == 0
    assert "newer words of tui:bob" not in texts_by_user(DATA)["tui:bob"]


def test_key_store_copies_older_than_their_retention_are_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("config.toml").write_text("[keys]\nkey_backup_days = 2\n")
    seed_with(DATA, "hi {user_id}")
    copies = DATA / "key-backups"
    copies.mkdir()
    old = copies / f"{KEY_BACKUP_PREFIX}{stamp(time.time() - 3 * 86_400)}.db"
    recent = copies / f"{KEY_BACKUP_PREFIX}{stamp(time.time() - 1 * 86_400)}.db"
    for path in (old, recent):
        path.write_bytes(b"")
    assert main(["backup", "--json"]) == 0
    assert not old.exists() and recent.exists()
    assert len(list(copies.glob(f"{KEY_BACKUP_PREFIX}*.db"))) == 2
    assert str(old) in capsys.readouterr().out


def test_keys_status_and_rotate_from_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_with(DATA, "before {user_id}")
    assert main(["keys", "status"]) == 0
    assert "user keys: 2" in capsys.readouterr().out
    old = (DATA / DEFAULT_KEY_FILE).read_text()
    assert main(["keys", "rotate"]) == 0
    assert "re-wrapped 2 user keys" in capsys.readouterr().out
    assert (DATA / DEFAULT_KEY_FILE).read_text() != old
    assert "before tui:bob" in texts_by_user(DATA)["tui:bob"]
    assert main(["keys", "new"]) == 0
    assert len(capsys.readouterr().out.strip()) == 44


def test_a_server_start_with_a_missing_key_file_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_with(DATA, "hi {user_id}")
    (DATA / DEFAULT_KEY_FILE).unlink()
    assert main(["sessions"]) == 3
    assert "master key file" in capsys.readouterr().err

    async def still_refused() -> None:
        async with open_database(Settings(data={"dir": str(DATA)})):
            pass

    with pytest.raises(Exception, match="master key file"):
        asyncio.run(still_refused())


async def test_a_running_server_deletes_key_store_copies_past_their_retention() -> None:
    from picobot.llm.scripted import ScriptedProvider
    from picobot.runtime import open_runtime

    copies = DATA / "key-backups"
    copies.mkdir(parents=True)
    old = copies / f"{KEY_BACKUP_PREFIX}{stamp(time.time() - 8 * 86_400)}.db"
    recent = copies / f"{KEY_BACKUP_PREFIX}{stamp(time.time() - 6 * 86_400)}.db"
    for path in (old, recent):
        path.write_bytes(b"")
    settings = Settings(data={"dir": str(DATA)})  # key_backup_days = 7
    async with open_runtime(settings, provider=ScriptedProvider()):
        for _ in range(200):
            if not old.exists():
                break
            await asyncio.sleep(0.05)
    assert not old.exists() and recent.exists()

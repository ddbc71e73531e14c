"""``picobot purge`` on the host: plan, terminal y/n, --yes, refusal without a terminal."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from pathlib import Path

import pytest

from picobot.cli.main import main
from picobot.cli.purge import purge
from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound
from picobot.privacy.scopes import OlderThanScope, UserScope
from picobot.runtime import open_runtime
from picobot.store.db import Database

ALICE = Identity("tui", "tui:alice", "local")
BOB = Identity("tui", "tui:bob", "local")


def seed(data_dir: Path) -> None:
    """Two users with one exchange each, through the real kernel."""
    seed_with(data_dir, "hello from {user_id}")


def seed_with(data_dir: Path, text: str) -> None:
    """Each of alice and bob sends ``text`` (``{user_id}`` filled in) and gets the echo."""

    async def go() -> None:
        settings = Settings(data={"dir": str(data_dir)})
        async with open_runtime(settings, provider=ScriptedProvider()) as rt:
            for who in (ALICE, BOB):
                async for _ in rt.kernel.handle(Inbound(who, text.format(user_id=who.user_id))):
                    pass

    asyncio.run(go())


def count_messages(data_dir: Path) -> dict[str, int]:
    import sqlite3

    with sqlite3.connect(data_dir / "conversations.db") as conn:
        rows = conn.execute(
            "SELECT s.user_id, COUNT(m.id) FROM sessions s JOIN messages m"
            " ON m.session_id = s.id GROUP BY s.user_id"
        ).fetchall()
    return {r[0]: r[1] for r in rows}


class Tty(io.StringIO):
    """A stdin that claims to be a terminal."""

    def isatty(self) -> bool:
        return True


def test_purge_user_with_yes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed(tmp_path / "data")
    assert main(["purge", "user", "tui:alice", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "Permanently delete all data of user tui:alice: 1 session, 2 messages" in out
    assert "Deleted all data of user tui:alice" in out
    assert count_messages(tmp_path / "data") == {"tui:bob": 2}


def test_non_interactive_stdin_without_yes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(tmp_path / "data")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert main(["purge", "user", "tui:alice"]) == 1
    assert "stdin is not a terminal" in capsys.readouterr().err
    assert count_messages(tmp_path / "data") == {"tui:alice": 2, "tui:bob": 2}


@pytest.mark.parametrize(
    ("answer", "deleted"),
    [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False), ("s\n", False)],
)
def test_terminal_answer_decides(tmp_path: Path, answer: str, deleted: bool) -> None:
    seed(tmp_path / "data")
    settings = Settings(data={"dir": str(tmp_path / "data")})
    out = io.StringIO()
    code = asyncio.run(
        purge(settings, UserScope("tui:bob"), assume_yes=False, stdin=Tty(answer), stdout=out)
    )
    assert code == (0 if deleted else 1)
    left = count_messages(tmp_path / "data")
    assert ("tui:bob" in left) is not deleted
    assert left["tui:alice"] == 2


def test_older_than_is_an_operator_purge(tmp_path: Path) -> None:
    seed(tmp_path / "data")
    settings = Settings(data={"dir": str(tmp_path / "data")})
    out = io.StringIO()
    code = asyncio.run(
        purge(settings, OlderThanScope(1), assume_yes=True, stdin=io.StringIO(), stdout=out)
    )
    assert code == 0 and "Nothing is stored" in out.getvalue()  # everything is fresh
    assert count_messages(tmp_path / "data") == {"tui:alice": 2, "tui:bob": 2}


def test_purge_session_by_id_and_bad_days(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(tmp_path / "data")
    import sqlite3

    with sqlite3.connect(tmp_path / "data" / "conversations.db") as conn:
        (sid,) = conn.execute("SELECT id FROM sessions WHERE user_id = 'tui:bob'").fetchone()
    assert main(["purge", "session", sid, "--yes"]) == 0
    assert count_messages(tmp_path / "data") == {"tui:alice": 2}
    assert main(["purge", "older", "soon", "--yes"]) == 2
    assert "DAYS must be a number" in capsys.readouterr().err


@pytest.mark.parametrize("days", ["0", "-3", "36501", "100000000000", "1" + "0" * 400])
def test_purge_older_days_out_of_range_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], days: str
) -> None:
    seed(tmp_path / "data")
    assert main(["purge", "older", days, "--yes"]) == 2
    err = capsys.readouterr().err
    assert err == f"picobot: error: DAYS must be a number from 1 to 36500, not {days!r}\n"
    assert count_messages(tmp_path / "data") == {"tui:alice": 2, "tui:bob": 2}


def test_purge_older_at_the_limit_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed(tmp_path / "data")
    assert main(["purge", "older", "36500", "--yes"]) == 0
    assert "Nothing is stored" in capsys.readouterr().out


def test_purge_unknown_session_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A typo must not read as "nothing to delete" (the admin API answers 404).
    seed(tmp_path / "data")
    assert main(["purge", "session", "no-such-id", "--yes"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "picobot: error: no session no-such-id\n"
    assert "Nothing is stored" not in captured.out
    assert count_messages(tmp_path / "data") == {"tui:alice": 2, "tui:bob": 2}


@pytest.mark.parametrize(
    ("argv", "status", "out", "err"),
    [
        (["user", "tui:alice"], 0, "no database at {db}; nothing to purge\n", ""),
        (["older", "30"], 0, "no database at {db}; nothing to purge\n", ""),
        (["session", "s1"], 1, "", "picobot: error: no session s1 (no database at {db})\n"),
    ],
)
def test_purge_without_a_database_creates_none(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    status: int,
    out: str,
    err: str,
) -> None:
    # A wrong working directory or config must not leave an empty database behind.
    db = Path("data") / "conversations.db"
    assert main(["purge", *argv, "--yes"]) == status
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (out.format(db=db), err.format(db=db))
    assert not (tmp_path / "data").exists()


def test_purge_entry_point_in_a_subprocess(tmp_path: Path) -> None:
    seed(tmp_path / "data")
    proc = subprocess.run(
        [sys.executable, "-m", "picobot", "purge", "user", "tui:alice"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "pass --yes" in proc.stderr


def test_a_failed_erasure_is_reported_and_left_to_retention(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import picobot.privacy.controller as controller_module
    from picobot.errors import StoreUnavailable

    seed(tmp_path / "data")

    async def disk_full(*_args: object, **_kw: object) -> None:
        raise StoreUnavailable("database or disk is full")

    # The erasure after the deletion fails: the full one, or a key deletion's checkpoint.
    real, real_checkpoint = controller_module.erase_residue, Database.checkpoint_passive
    monkeypatch.setattr(controller_module, "erase_residue", disk_full)
    monkeypatch.setattr(Database, "checkpoint_passive", disk_full)
    assert main(["purge", "user", "tui:alice", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "the purge failed: database or disk is full" in err
    assert "erased by the next retention run" in err
    assert "if any, stay deleted: run the same purge again" in err
    assert count_messages(tmp_path / "data") == {"tui:bob": 2}

    monkeypatch.setattr(controller_module, "erase_residue", real)
    monkeypatch.setattr(Database, "checkpoint_passive", real_checkpoint)
    assert main(["status"]) == 4
    assert "picobot: warning: a purge started" in capsys.readouterr().err
    assert main(["retention", "run"]) == 0
    capsys.readouterr()
    assert main(["status"]) == 0
    assert "a purge started" not in capsys.readouterr().err

"""``picobot facts`` on a real SQLite file: list with filters, show, create, update, delete."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from picobot.cli.main import main
from picobot.store.learned.fact_rules import Observation

T0 = 1_700_000_000.0
DB = Path("data/conversations.db")


async def _seed() -> dict[str, int]:
    from picobot.store.conversation.sessions import SessionRepo
    from picobot.store.db import Database
    from picobot.store.learned.fact_writes import FactStore

    db = await Database.open(DB)
    try:
        store = FactStore(db)
        sid = await SessionRepo(db).current_or_create("tui", "c", "tui:alice")
        bob = await SessionRepo(db).current_or_create("tui", "c", "tui:bob")
        tea, trip = await store.observe(
            "tui:alice",
            [
                Observation("tea", "preference", "likes green tea"),
                Observation("trip", "plan", "Japan in May"),
            ],
            session_id=sid,
            message_id=1,
            now=T0,
        )
        [sister] = await store.observe(
            "tui:bob",
            [Observation("ann", "relationship", "Ann is his sister")],
            session_id=bob,
            message_id=2,
            now=T0,
        )
        await store.observe(
            "tui:alice",
            [Observation("tea", "preference", "likes green tea")],
            session_id=sid,
            message_id=3,
            now=T0 + 5,
        )
        return {"tea": tea.fact_id, "trip": trip.fact_id, "sister": sister.fact_id}
    finally:
        await db.close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["facts", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_filters_across_users(capsys: pytest.CaptureFixture[str]) -> None:
    ids = asyncio.run(_seed())
    code, out, _ = run(capsys, "list")
    assert code == 0 and "tui:alice:" in out and "tui:bob:" in out
    assert f"#{ids['tea']} (0.80) preference, tea: likes green tea" in out
    _, out, _ = run(capsys, "list", "--user", "tui:bob", "--json")
    assert [f["id"] for f in json.loads(out)["facts"]] == [ids["sister"]]
    _, out, _ = run(capsys, "list", "--min-confidence", "0.75", "--json")
    assert [f["id"] for f in json.loads(out)["facts"]] == [ids["tea"]]
    _, out, _ = run(capsys, "list", "--text", "JAPAN", "--category", "plan", "--json")
    assert [f["id"] for f in json.loads(out)["facts"]] == [ids["trip"]]
    _, out, _ = run(capsys, "list", "--subject", "tea", "--inactive", "--json")
    assert json.loads(out)["facts"] == []
    code, _, err = run(capsys, "list", "--min-confidence", "2")
    assert code == 2 and "between 0 and 1" in err
    # A typo is an error, not an empty listing (the admin API's rule too).
    code, _, err = run(capsys, "list", "--category", "hobby")
    assert code == 1 and "category must be one of" in err
    code, _, err = run(capsys, "list", "--min-confidence", "0.8", "--max-confidence", "0.2")
    assert code == 1 and "above" in err


def test_show_prints_sources_and_history(capsys: pytest.CaptureFixture[str]) -> None:
    ids = asyncio.run(_seed())
    code, out, _ = run(capsys, "show", str(ids["tea"]))
    assert code == 0 and "learned from session" in out and "message 3" in out
    assert "extracted" in out and "reinforced; confidence 0.7 -> 0.8" in out
    _, out, _ = run(capsys, "show", str(ids["tea"]), "--json")
    fact = json.loads(out)["fact"]
    assert [h["reason"] for h in fact["history"]] == ["extracted", "reinforced"]
    assert run(capsys, "show", "999")[0] == 1


def test_create_and_update_are_recorded_as_operator_changes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(_seed())
    code, out, _ = run(
        capsys,
        "create",
        "--user",
        "tui:carol",
        "--category",
        "personal",
        "--subject",
        "Home",
        "lives in Oslo",
        "--json",
    )
    made = json.loads(out)["fact"]
    assert code == 0 and made["confidence"] == 0.7 and made["subject"] == "home"
    code, _, err = run(capsys, "create", "--user", "x", "--category", "mood", "sad")
    assert code == 1 and "category must be one of" in err
    code, out, _ = run(capsys, "update", str(made["id"]), "--confidence", "0.2", "--json")
    assert json.loads(out)["fact"]["active"] is False  # below 0.3
    run(capsys, "update", str(made["id"]), "--text", "lives in Bergen", "--activate")
    _, out, _ = run(capsys, "show", str(made["id"]), "--json")
    fact = json.loads(out)["fact"]
    assert fact["text"] == "lives in Bergen" and fact["active"] is True
    assert [h["reason"] for h in fact["history"]] == ["operator"] * 3
    assert fact["history"][-1]["old_text"] == "lives in Oslo"
    assert fact["history"][0]["actor"].startswith("cli:")
    assert run(capsys, "update", str(made["id"]))[0] == 2


def test_pin_and_unpin_are_operator_changes(capsys: pytest.CaptureFixture[str]) -> None:
    ids = asyncio.run(_seed())
    code, out, _ = run(capsys, "update", str(ids["trip"]), "--pin", "--json")
    assert code == 0 and json.loads(out)["fact"]["pinned"] is True
    _, out, _ = run(capsys, "list", "--pinned", "--json")
    assert [f["id"] for f in json.loads(out)["facts"]] == [ids["trip"]]
    _, out, _ = run(capsys, "list", "--unpinned", "--user", "tui:alice", "--json")
    assert [f["id"] for f in json.loads(out)["facts"]] == [ids["tea"]]
    run(capsys, "update", str(ids["trip"]), "--unpin", "--confidence", "0.9")
    _, out, _ = run(capsys, "show", str(ids["trip"]), "--json")
    fact = json.loads(out)["fact"]
    assert fact["pinned"] is False and fact["confidence"] == 0.9
    history = [(h["reason"], h["actor"]) for h in fact["history"]]
    assert [reason for reason, _ in history] == ["extracted", "pinned", "operator", "unpinned"]
    assert all(actor.startswith("cli:") for _, actor in history[1:])
    assert run(capsys, "update", "999", "--pin")[0] == 1


def test_delete_by_filter_is_two_step_and_deletes_what_it_counted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = asyncio.run(_seed())
    assert run(capsys, "delete")[0] == 2  # no filter: refused
    code, _, err = run(capsys, "delete", "--user", "tui:alice")
    assert code == 1 and "--yes" in err  # stdin is not a terminal
    tty = io.StringIO("n\n")
    tty.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stdin", tty)
    code, out, _ = run(capsys, "delete", "--user", "tui:alice")
    assert code == 1 and "delete 2 chosen learned facts of 1 user:" in out
    assert "2 learned facts?" in out
    assert "Cancelled" in out
    code, out, _ = run(capsys, "delete", "--user", "tui:alice", "--yes")
    assert code == 0 and "Deleted 2 chosen learned facts of 1 user:" in out
    _, out, _ = run(capsys, "list", "--json")
    assert [f["id"] for f in json.loads(out)["facts"]] == [ids["sister"]]
    code, out, _ = run(capsys, "delete", str(ids["sister"]), "--yes")
    assert "Deleted 1 chosen learned fact of 1 user" in out
    code, out, _ = run(capsys, "delete", str(ids["sister"]), "--yes")
    assert code == 0 and "Nothing is stored for the chosen learned facts" in out


def test_reads_without_a_database_create_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "list")[1].strip() == "no facts"
    assert not DB.exists()


def test_extract_reads_a_users_sessions_once_with_the_configured_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def seed() -> None:
        from picobot.store.conversation.messages import MessageRepo
        from picobot.store.conversation.sessions import SessionRepo
        from picobot.store.db import Database

        db = await Database.open(DB)
        sid = await SessionRepo(db).current_or_create("tui", "c", "tui:alice")
        await MessageRepo(db).append(sid, "user", "I live in Oslo", 4, created_at=T0)
        await db.close()

    asyncio.run(seed())
    # The scripted model without a script echoes: not a JSON array, so nothing is learned.
    monkeypatch.setenv("PICOBOT_LLM__PROVIDER", "scripted")
    code, out, _ = run(capsys, "extract", "--user", "tui:alice")
    assert code == 0 and "Read 1 new messages of 1 sessions: 0 new facts" in out
    code, out, _ = run(capsys, "extract", "--user", "tui:alice")
    assert "Read 0 new messages" in out

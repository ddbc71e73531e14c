"""User data export: completeness, isolation, order, both formats, progress, and the CLI."""

from __future__ import annotations

import argparse
import io
import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from picobot.cli import data as cli_data
from picobot.config.settings import DataSettings, Settings
from picobot.config.store import StoreSettings
from picobot.privacy.export import export_user, iter_user_jsonl
from picobot.store.channels.webhooks import WebhookStore
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.conversation.tool_records import ToolRecordRepo
from picobot.store.db import Database
from picobot.store.erasure import export, export_pages
from picobot.store.erasure.export import count_user_data

ALICE = "telegram:1001"
BOB = "telegram:2002"
CAROL = "slack:T1:U3"
T0 = 1_700_000_000.0


@dataclass
class World:
    """What was stored, to compare exports against."""

    db: Database
    alice_sessions: list[str]
    bob_session: str
    alice_messages: dict[str, list[tuple[str, str]]]


async def _session(db: Database, user: str, chat: str, created: float, **kw: Any) -> str:
    sid = await SessionRepo(db).create("telegram", chat, user, **kw)
    # Fixed times make the expected session order independent of how fast the test runs.
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE sessions SET created_at = ?, last_active = ? WHERE id = ?",
            (created, created, sid),
        )
    return sid


async def _build(db: Database) -> World:
    messages, memories = MessageRepo(db), MemoryRepo(db)
    first = await _session(db, ALICE, "c1", T0)
    texts = [
        ("user", "hello, I like zebras"),
        ("assistant", "Noted: zebras.\n## Session fake heading inside a message"),
        ("user", 'ünïcödé and "quotes" and a\nsecond line'),
    ]
    for i, (role, text) in enumerate(texts):
        await messages.append(first, role, text, 5, created_at=T0 + i)
    await SummaryRepo(db).save(first, "alice talked about zebras", 2, 6, T0 + 10)
    tools = ToolRecordRepo(db)
    await tools.add(first, ALICE, "memory_search", '{"q": "zebra"}', "1 hit", True, T0 + 3)
    # A fork copies the parent's transcript and summary; it is a session of its own in
    # the export.
    fork = await _session(db, ALICE, "c1", T0 + 100, parent_session_id=first)
    await messages.append(fork, "user", "after the fork", 4, created_at=T0 + 101)
    other = await _session(db, ALICE, "c2", T0 + 200)
    await memories.save(ALICE, "favourite_animal", "zebra", max_count=50, now=T0)
    await memories.save(ALICE, "city", "Lisbon", max_count=50, now=T0 + 1)

    bob = await _session(db, BOB, "c9", T0 + 50)
    await messages.append(bob, "user", "BOBSECRET message", 4, created_at=T0 + 51)
    await SummaryRepo(db).save(bob, "BOBSECRET summary", 1, 4, T0 + 52)
    await tools.add(bob, BOB, "BOBSECRET_tool", "{}", "BOBSECRET result", False, T0 + 53)
    await memories.save(BOB, "bob_key", "BOBSECRET memory", max_count=50, now=T0)
    expected = {
        first: texts,
        fork: [*texts, ("user", "after the fork")],
        other: [],
    }
    return World(db, [first, fork, other], bob, expected)


@pytest.fixture
async def world(db: Database) -> World:
    return await _build(db)


async def _jsonl(db: Database, user: str = ALICE, **kw: Any) -> list[dict[str, Any]]:
    out = io.StringIO()
    await export_user(db, user, out, **kw)
    text = out.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


async def test_jsonl_holds_every_record_of_the_user_and_nothing_else(world: World) -> None:
    records = await _jsonl(world.db)
    header = records[0]
    assert header["type"] == "export_header"
    assert header["user_id"] == ALICE and header["format_version"] == 1
    by_type: dict[str, list[dict[str, Any]]] = {}
    for record in records[1:]:
        by_type.setdefault(record["type"], []).append(record)
    assert set(by_type) == {"session", "message", "memory", "summary", "tool_record", "event"}

    sessions = by_type["session"]
    assert [s["id"] for s in sessions] == world.alice_sessions
    assert {s["user_id"] for s in sessions} == {ALICE}
    assert sessions[1]["parent_session_id"] == world.alice_sessions[0]
    assert sessions[0]["parent_session_id"] is None
    assert (sessions[2]["channel"], sessions[2]["chat_id"]) == ("telegram", "c2")
    assert sessions[0]["created_at"] == "2023-11-14T22:13:20+00:00"

    for sid, expected in world.alice_messages.items():
        got = [m for m in by_type["message"] if m["session_id"] == sid]
        assert [(m["role"], m["content"]) for m in got] == expected
        assert [m["seq_order"] for m in got] == list(range(1, len(expected) + 1))
    assert {(m["key"], m["content"]) for m in by_type["memory"]} == {
        ("favourite_animal", "zebra"),
        ("city", "Lisbon"),
    }
    summaries = by_type["summary"]
    assert [s["session_id"] for s in summaries] == world.alice_sessions[:2]  # parent, fork
    for summary in summaries:
        assert (summary["summary"], summary["covered_seq"]) == ("alice talked about zebras", 2)
    [tool] = by_type["tool_record"]
    assert (tool["name"], tool["arguments"], tool["result"], tool["ok"]) == (
        "memory_search",
        '{"q": "zebra"}',
        "1 hit",
        True,
    )
    # What happened, in order: ids and counts, never the text.
    events = by_type["event"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert {e["session_id"] for e in events} <= {*world.alice_sessions, None}
    appended = [e for e in events if e["event"] == "message.appended"]
    assert len(appended) == len(by_type["message"]) - 3  # the fork copied three
    assert "zebra" not in json.dumps(events)
    raw = json.dumps(records)
    assert "BOBSECRET" not in raw and world.bob_session not in raw


async def test_each_session_is_followed_by_its_own_records(world: World) -> None:
    records = await _jsonl(world.db)
    current = None
    kinds = []
    for record in records[1:]:
        if record["type"] == "event":
            break  # the user's events come last, across sessions
        if record["type"] == "session":
            current = record["id"]
        elif record["type"] != "memory":
            assert record["session_id"] == current
        else:
            assert current is None, "memories come before the sessions"
        kinds.append(record["type"])
    first_session = kinds.index("session")
    assert kinds[first_session : first_session + 6] == [
        "session",
        "summary",
        "message",
        "message",
        "message",
        "tool_record",
    ]


async def test_small_pages_give_the_same_export(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sessions with equal created_at must neither repeat nor vanish across page edges.
    async with world.db.transaction() as conn:
        await conn.execute("UPDATE sessions SET created_at = ? WHERE user_id = ?", (T0, ALICE))
    whole = await _jsonl(world.db)
    monkeypatch.setattr(export_pages, "PAGE_SIZE", 1)
    paged = await _jsonl(world.db)
    assert paged[1:] == whole[1:]
    assert sorted(r["id"] for r in paged if r["type"] == "session") == sorted(world.alice_sessions)
    assert sum(r["type"] == "message" for r in paged) == 7


async def test_iter_user_jsonl_is_the_same_stream(world: World) -> None:
    lines = [line async for line in iter_user_jsonl(world.db, ALICE, exported_at=T0)]
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)
    assert json.loads(lines[0])["exported_at"] == "2023-11-14T22:13:20+00:00"
    records = await _jsonl(world.db)
    assert [json.loads(line) for line in lines[1:]] == records[1:]


async def test_markdown_has_memories_and_one_section_per_session(world: World) -> None:
    out = io.StringIO()
    stats = await export_user(world.db, ALICE, out, fmt="markdown")
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0] == f"# PicoBot data export for `{ALICE}`"
    assert lines.count("## Memories") == 1
    headings = [line for line in lines if line.startswith("## Session ")]
    assert [h.split()[2] for h in headings] == world.alice_sessions
    assert "## Session 2023-11-14 22:13:20 UTC" not in text
    assert headings[0].startswith(f"## Session {world.alice_sessions[0]} (2023-11-14 22:13:20 UTC")
    assert text.index("## Memories") < text.index("**favourite_animal**") < text.index(headings[0])
    assert "> zebra" in text and "> Lisbon" in text
    # The summary sits under the first session's heading, before its first message.
    first = text[text.index(headings[0]) : text.index(headings[1])]
    assert first.index("alice talked about zebras") < first.index("**user** (2023-11-14 22:13:20")
    assert '> ünïcödé and "quotes" and a\n> second line' in first
    assert "> ## Session fake heading inside a message" in first
    assert "**tool call** memory_search" in first and '{"q": "zebra"}' in first
    assert f"forked from session {world.alice_sessions[0]}" in text
    assert text.count("**user** (") == 5 and text.count("**assistant** (") == 2
    assert "BOBSECRET" not in text
    assert stats == export.ExportStats(
        sessions=3, messages=7, memories=2, summaries=2, tool_records=1
    )


async def test_progress_counts_reach_the_total(world: World) -> None:
    calls: list[tuple[int, int]] = []
    await export_user(world.db, ALICE, io.StringIO(), progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, 7)
    assert calls[-1] == (7, 7)
    assert [d for d, _ in calls] == list(range(8))


async def test_counts_and_an_unknown_user(world: World) -> None:
    assert await count_user_data(world.db, ALICE) == export.ExportStats(3, 7, 2, 2, 1)
    nobody = await count_user_data(world.db, "telegram:404")
    assert nobody.empty
    records = await _jsonl(world.db, "telegram:404")
    assert [r["type"] for r in records] == ["export_header"]


async def test_memories_only_user_gets_a_markdown_document(db: Database) -> None:
    await MemoryRepo(db).save("tui:local", "pet", "cat", max_count=50)
    out = io.StringIO()
    stats = await export_user(db, "tui:local", out, fmt="markdown")
    assert (stats.memories, stats.sessions) == (1, 0)
    assert "**pet**" in out.getvalue() and "## Session" not in out.getvalue()


@dataclass(frozen=True)
class _PlatformMessage:
    message_id: str
    user_id: str
    chat_id: str
    text: str
    reply_to: dict[str, Any]


async def _webhook_rows(db: Database) -> None:
    """CAROL's only data: webhook rows (a platform since disabled, a reply that failed)."""
    store = WebhookStore(db, clock=lambda: T0)
    await store.accept("slack", _PlatformMessage("m1", CAROL, "C1", "carol waits", {}))
    done = await store.accept("telegram", _PlatformMessage("m2", CAROL, "7", "carol asks", {}))
    assert done is not None
    await store.mark_processed(
        done, ["reply to carol"], platform="telegram", reply_to={}, user_id=CAROL, chat_id="7"
    )
    [reply] = await store.due_outbound(T0, 10)
    await store.mark_failed(reply.id, "403 Forbidden")
    await store.accept("slack", _PlatformMessage("m3", BOB, "C9", "BOBSECRET inbox", {}))


async def test_webhook_rows_are_exported(world: World) -> None:
    # Before, a user whose only stored data sat in the webhook inbox or reply queue got
    # "no data stored", though `purge user` deletes those rows as theirs.
    await _webhook_rows(world.db)
    stats = await count_user_data(world.db, CAROL)
    assert not stats.empty
    assert (stats.webhook_messages, stats.outbound_replies) == (2, 1)
    records = await _jsonl(world.db, CAROL)
    inbox = [r for r in records if r["type"] == "webhook_message"]
    got = [(r["platform"], r["message_id"], r["chat_id"], r["text"], r["status"]) for r in inbox]
    assert got == [
        ("slack", "m1", "C1", "carol waits", "pending"),
        ("telegram", "m2", "7", "", "done"),
    ]
    assert inbox[0]["received_at"] == "2023-11-14T22:13:20+00:00"
    assert inbox[0]["processed_at"] is None
    [reply] = [r for r in records if r["type"] == "outbound_reply"]
    assert (reply["platform"], reply["chat_id"], reply["text"], reply["status"]) == (
        "telegram",
        "7",
        "reply to carol",
        "failed",
    )
    assert reply["sent_at"] is None and reply["attempts"] == 1
    assert "BOBSECRET" not in json.dumps(records)
    assert "webhook_message" not in {r["type"] for r in await _jsonl(world.db, ALICE)}

    out = io.StringIO()
    md_stats = await export_user(world.db, CAROL, out, fmt="markdown")
    assert md_stats == stats
    text = out.getvalue()
    assert text.index("## Webhook messages") < text.index("> carol waits")
    assert text.index("## Queued replies") < text.index("> reply to carol")
    assert "BOBSECRET" not in text


# --- the CLI ----------------------------------------------------------------------------


def _cli(argv: list[str], settings: Settings) -> int:
    parser = argparse.ArgumentParser(prog="picobot")
    cli_data.add_export_command(parser.add_subparsers())
    return cli_data.run_export(parser.parse_args(argv), settings)


@pytest.fixture
def settings(tmp_path: Path, world: World, store_settings: StoreSettings) -> Settings:
    return Settings(data=DataSettings(dir=str(tmp_path / "data")), store=store_settings)


@pytest.fixture
async def carol(world: World) -> None:
    await _webhook_rows(world.db)


@pytest.mark.usefixtures("carol")
def test_cli_exports_a_user_with_only_webhook_rows(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "carol.jsonl"
    assert _cli(["export", "--user", CAROL, "-o", str(target)], settings) == 0
    assert "2 webhook messages, 1 queued replies" in capsys.readouterr().out
    assert "carol waits" in target.read_text(encoding="utf-8")


def test_cli_writes_jsonl_to_stdout(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["export", "--user", ALICE], settings) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert records[0]["type"] == "export_header"
    assert sum(r["type"] == "message" for r in records) == 7


def test_cli_writes_markdown_to_a_private_file_with_progress(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "alice.md"
    argv = ["export", "--user", ALICE, "--format", "markdown", "-o", str(target), "--progress"]
    assert _cli(argv, settings) == 0
    assert target.read_text(encoding="utf-8").startswith("# PicoBot data export")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    out, err = capsys.readouterr()
    assert (
        out == f"wrote {target}: 3 sessions, 7 messages, 2 memories, 2 summaries, 1 tool records\n"
    )
    assert "[" + "#" * 30 + "] 100% 7/7 messages" in err
    assert err.endswith("\n")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_cli_unknown_user_fails_without_creating_a_file(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "x.jsonl"
    assert _cli(["export", "--user", "telegram:404", "-o", str(target)], settings) == 1
    assert capsys.readouterr().err == "picobot: error: no data stored for telegram:404\n"
    assert not target.exists()


def test_cli_without_a_database_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(data=DataSettings(dir=str(tmp_path / "empty")))
    assert _cli(["export", "--user", ALICE], settings) == 1
    assert capsys.readouterr().err == f"picobot: error: no data stored for {ALICE}\n"
    assert not (tmp_path / "empty").exists()


def test_failed_export_leaves_the_previous_file_untouched(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "alice.jsonl"
    target.write_text("previous export\n", encoding="utf-8")
    seen: list[int] = []

    def fail_midway(self: cli_data.ProgressBar, done: int, total: int) -> None:
        seen.append(done)
        if done == 3:  # three messages are already written to the temporary file
            raise RuntimeError("disk went away")

    monkeypatch.setattr(cli_data.ProgressBar, "__call__", fail_midway)
    with pytest.raises(RuntimeError, match="disk went away"):
        _cli(["export", "--user", ALICE, "-o", str(target), "--progress"], settings)
    assert seen[-1] == 3
    assert target.read_text(encoding="utf-8") == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alice.jsonl", "data"]


def test_unwritable_target_is_a_clean_error(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing-dir" / "alice.jsonl"
    assert _cli(["export", "--user", ALICE, "-o", str(target)], settings) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"picobot: error: cannot write {target}: ")


def test_main_runs_export(
    world: World,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    store_settings: StoreSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from picobot.cli.main import main

    # conftest chdirs into tmp_path, so the default data dir is the fixture's.
    monkeypatch.setenv("PICOBOT_STORE__URL", store_settings.url)
    target = tmp_path / "out.jsonl"
    assert main(["export", "--user", ALICE, "-o", str(target)]) == 0
    lines = target.read_text(encoding="utf-8").splitlines()
    data = [line for line in lines if json.loads(line)["type"] != "event"]
    assert len(data) == 1 + 3 + 7 + 2 + 2 + 1 < len(lines)
    assert main(["export", "--user", "nobody"]) == 1
    assert capsys.readouterr().err.endswith("picobot: error: no data stored for nobody\n")

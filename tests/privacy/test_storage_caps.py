"""Storage caps through a real WebSocket server and the kernel over a real SQLite file.

Off by default, nothing is deleted. Past ``max_sessions_per_user`` the least recently
active session goes whole, with everything derived from it, and its bytes are gone from
the database file and WAL after retention's erasure; past ``max_messages_per_session``
the oldest exchanges go and the next prompt no longer holds them. A session in use in a
chat is never deleted, pins are kept, each enforcement records its event and tells the
user once, and a bad cap in the config is refused with the key named.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from picobot.access.context import ToolContext
from picobot.channels.websocket.server import WebSocketChannel
from picobot.config.channels import WebSocketSettings
from picobot.config.settings import DataSettings, Settings, load_settings
from picobot.errors import ConfigError
from picobot.kernel.prompt.retriever import MemoryRetriever
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.runtime import Runtime, open_runtime
from picobot.store.conversation.events import Event, EventFilter, list_events
from picobot.store.db import Database
from picobot.store.learned.digests import DigestStore, Provenance
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.pins import PinStore
from picobot.store.retrieval.search import SearchIndex
from picobot.store.retrieval.vectors import store_vectors
from picobot.store.task_runs import (
    ERASE_TASK_NAME,
    RESIDUE_WAITING,
    erasure_state,
    last_run,
    note_residue,
    record_erasure,
)
from picobot.tasks.retention import RetentionTask
from tests.channels.websocket.test_server import (
    ENV,
    KEY_A,
    KEY_B,
    USER_A,
    USER_B,
    Frame,
    Server,
    chat,
    types,
)
from tests.config.test_bounds import WriteConfig, refused
from tests.privacy.test_erasure import new_marker, scan
from tests.privacy.test_purge_store import add_summary, add_tool, integrity_ok
from tests.sealed import scan_bytes, sealed_tails

PRIVATE = Identity("telegram", "telegram:42", "42")
GROUP = Identity("telegram", "telegram:42", "-100")


@pytest.fixture(autouse=True)
def api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, f"{KEY_A}, {KEY_B}")


@pytest.fixture
def rng() -> random.Random:
    return random.Random(20261204)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


def settings(tmp_path: Path, **retention: Any) -> Settings:
    return Settings(data=DataSettings(dir=str(tmp_path / "data")), session={"retention": retention})


async def serve(
    stack: AsyncExitStack, tmp_path: Path, provider: ScriptedProvider | None = None, **caps: Any
) -> Server:
    """A runtime with ``caps`` in ``[session.retention]`` and a WebSocket channel on it."""
    runtime = await stack.enter_async_context(
        open_runtime(settings(tmp_path, **caps), provider=provider or ScriptedProvider())
    )
    ws = WebSocketSettings(enabled=True, port=0, rate_limit_per_minute=60_000)
    channel = await stack.enter_async_context(WebSocketChannel(runtime.kernel, ws))
    return Server(runtime, channel)


@asynccontextmanager
async def runtime(tmp_path: Path, **caps: Any) -> AsyncIterator[Runtime]:
    async with open_runtime(settings(tmp_path, **caps), provider=ScriptedProvider()) as rt:
        yield rt


async def say(rt: Runtime, who: Identity, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(who, text))]


def notices(events: list[Outbound]) -> list[str]:
    return [e.text for e in events if e.kind is OutboundKind.NOTICE]


def frame_notices(frames: list[Frame]) -> list[str]:
    return [str(f["text"]) for f in frames if f["type"] == "notice"]


def session_of(frames: list[Frame]) -> str:
    return str(next(f["session_id"] for f in frames if f["type"] == "session"))


async def capped_events(db: Database) -> list[Event]:
    where = EventFilter(types=("retention.capped",))
    return await db.read(lambda c: list_events(c, where, 1000))


async def count(db: Database, sql: str, *params: Any) -> int:
    row = await db.fetchone(sql, params)
    assert row is not None
    return int(row[0])


async def session_ids(db: Database, user_id: str) -> set[str]:
    rows = await db.fetchall("SELECT id FROM sessions WHERE user_id = ?", (user_id,))
    return {str(r[0]) for r in rows}


async def derive(db: Database, user_id: str, sid: str, mark: list[str], rng: random.Random) -> None:
    """What the background work derives from session ``sid`` (a summary, a tool record,
    vectors, a learned fact, a reflection, recall index entries), each with a fresh
    marker appended to ``mark``."""

    def marker() -> str:
        mark.append(new_marker(rng))
        return mark[-1]

    rows = await db.fetchall(
        "SELECT id, seq_order FROM messages WHERE session_id = ? ORDER BY seq_order", (sid,)
    )
    ids = [int(r[0]) for r in rows]
    await add_summary(db, sid, f"summary {marker()}", 2)
    await add_tool(db, sid, user_id, marker())
    blobs = [(i, (marker().encode() * 20)[:768]) for i in ids]
    assert await db.write(lambda c: store_vectors(c, "all-MiniLM-L6-v2", blobs)) == len(ids)
    fact = Observation(marker(), "preference", f"likes {marker()}")
    await FactStore(db).observe(user_id, [fact], session_id=sid, message_id=ids[0], now=time.time())
    source = Provenance(sid, ids[0], ids[-1], 1, len(ids))
    await DigestStore(db).add_reflection(user_id, source, f"refl {marker()}", 5, now=time.time())
    await SearchIndex(db).index_pending()


# --- off by default -----------------------------------------------------------------------


async def test_caps_are_off_by_default_and_keep_everything(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    server = await serve(stack, tmp_path)
    assert server.runtime.settings.session.retention.max_sessions_per_user == 0
    assert server.runtime.settings.session.retention.max_messages_per_session == 0
    assert server.runtime.kernel.after_turn == []  # nothing runs after a turn: no cost
    ws, _ = await server.client(KEY_A)
    said: list[Frame] = []
    async with ws:
        for n in range(4):
            said += await chat(ws, "/new")
            for turn in range(6):
                said += await chat(ws, f"session {n} turn {turn}")
    db = server.runtime.db
    assert len(await session_ids(db, USER_A)) == 4
    assert await count(db, "SELECT COUNT(*) FROM messages") == 4 * 6 * 2
    assert [n for n in frame_notices(said) if "deleted" in n] == []
    assert await capped_events(db) == []


# --- the session cap ----------------------------------------------------------------------


async def test_the_session_cap_deletes_the_oldest_session_whole_and_says_so(
    stack: AsyncExitStack, tmp_path: Path, rng: random.Random
) -> None:
    server = await serve(stack, tmp_path, max_sessions_per_user=2)
    db = server.runtime.db
    gone: list[str] = [new_marker(rng)]
    kept: list[str] = [new_marker(rng), new_marker(rng)]
    alice, _ = await server.client(KEY_A)
    bob, _ = await server.client(KEY_B)
    async with alice, bob:
        first = session_of(await chat(alice, f"my first words {gone[0]}"))
        await derive(db, USER_A, first, gone, rng)
        await chat(bob, f"bob keeps {kept[0]}")
        await chat(alice, "/new")
        second = await chat(alice, f"second session {kept[1]}")
        assert frame_notices(second) == []  # two sessions: at the cap, not past it
        data_dir = db.path.parent
        await db.checkpoint()
        # Texts are sealed: their ciphertext is what a byte scan can look for.
        sealed = await sealed_tails(db, gone + kept)
        # Not the vector's marker (no words) nor the fact's subject (in clear, for lookups).
        assert {gone[0], *kept} <= set(sealed) and len(sealed) >= len(kept) + 4
        assert scan_bytes(data_dir, sealed) == set(sealed)
        frames = await chat(alice, "/new")
    third = session_of(frames)

    *_, said = frame_notices(frames)
    assert said.startswith(f"Your oldest session ({first}, last active ")
    assert said.endswith("was deleted: this server keeps at most 2 sessions per user.")
    assert await session_ids(db, USER_A) == {session_of(second), third}
    assert len(await session_ids(db, USER_B)) == 1
    # Everything derived from it went with it, as a session purge takes it.
    for table in ("messages", "session_summaries", "tool_records", "events"):
        sql = f"SELECT COUNT(*) FROM {table} WHERE session_id = ?"  # noqa: S608
        assert await count(db, sql, first) == 0, table
    assert await count(db, "SELECT COUNT(*) FROM digests WHERE session_id = ?", first) == 0
    assert await count(db, "SELECT COUNT(*) FROM facts WHERE user_id = ?", USER_A) == 0
    assert await count(db, "SELECT COUNT(*) FROM message_vectors") == 0  # only s1 had some
    assert await SearchIndex(db).search(USER_A, [gone[0]]) == []
    [event] = await capped_events(db)
    assert (event.user_id, event.session_id, event.actor) == (USER_A, third, "supervisor")
    assert event.payload["cap"] == "sessions" and event.payload["limit"] == 2
    counts = event.payload["counts"]
    assert (counts["sessions"], counts["messages"], counts["summaries"]) == (1, 2, 1)
    assert (counts["facts"], counts["digests"], counts["tool_records"]) == (1, 1, 1)

    # The residue waits for retention's erasure, as a sweep's does; then no byte is left.
    state = await erasure_state(db, 86_400)
    assert state.waiting_since is not None
    report = await RetentionTask(db, max_age_days=90).run()  # as `picobot retention run`
    assert report.erased
    assert scan(data_dir, gone) == {}
    assert scan_bytes(data_dir, sealed) == set(kept)
    await integrity_ok(db)


async def test_a_session_in_use_in_a_chat_is_never_deleted(tmp_path: Path) -> None:
    async with runtime(tmp_path, max_sessions_per_user=1) as rt:
        private = (await say(rt, PRIVATE, "hello from the private chat"))[0].session_id
        out = await say(rt, GROUP, "hello from the group")
        group = out[0].session_id
        # Two sessions past a cap of one, but each is a chat's current one: both stay.
        assert notices(out) == []
        assert await session_ids(rt.db, PRIVATE.user_id) == {private, group}
        out = await say(rt, PRIVATE, "/new")
        new = out[0].session_id
        assert notices(out)[-1].startswith(f"Your oldest session ({private}, ")
        assert await session_ids(rt.db, PRIVATE.user_id) == {group, new}
        out = await say(rt, GROUP, "still here")
        assert out[-1].kind is OutboundKind.DONE and out[-1].session_id == group


async def test_pinned_messages_and_their_sessions_are_kept(tmp_path: Path) -> None:
    async with runtime(tmp_path, max_sessions_per_user=1, max_messages_per_session=2) as rt:
        pinned = (await say(rt, PRIVATE, "pin this one"))[0].session_id
        assert pinned is not None
        mid = await count(rt.db, "SELECT MIN(id) FROM messages WHERE session_id = ?", pinned)
        assert await PinStore(rt.db).set_pinned(PRIVATE.user_id, [mid], True, now=time.time())
        out = await say(rt, PRIVATE, "a second exchange")
        # The pinned message stays and counts; its reply and nothing else could go.
        assert notices(out) == [
            "The oldest message of this session was deleted: this server keeps at most 2"
            " messages per session."
        ]
        rows = await rt.db.fetchall("SELECT picobot_open(content) FROM messages ORDER BY seq_order")
        assert [r[0] for r in rows] == [
            "pin this one",
            "a second exchange",
            "You said: a second exchange",
        ]
        out = await say(rt, PRIVATE, "/new")
        assert [n for n in notices(out) if "deleted" in n] == []  # it holds a pin
        assert pinned in await session_ids(rt.db, PRIVATE.user_id)


# --- the message cap ----------------------------------------------------------------------


async def test_the_message_cap_trims_the_oldest_exchanges_out_of_the_next_prompt(
    stack: AsyncExitStack, tmp_path: Path, rng: random.Random
) -> None:
    provider = ScriptedProvider()
    server = await serve(stack, tmp_path, provider, max_messages_per_session=4)
    db, retriever = server.runtime.db, server.runtime.kernel.retriever
    first, second = new_marker(rng), new_marker(rng)
    ws, _ = await server.client(KEY_A)
    async with ws:
        await chat(ws, f"one {first}")
        await chat(ws, f"two {second}")
        frames = await chat(ws, "three")
        sid = session_of(frames)
        # The reply is out first; the notice follows it, once.
        assert types(frames)[-2:] == ["done", "notice"]
        assert frame_notices(frames) == [
            "The 2 oldest messages of this session were deleted: this server keeps at most 4"
            " messages per session."
        ]
        assert isinstance(retriever, MemoryRetriever)
        assert sid not in retriever._epochs  # its cached prompt was dropped
        assert (await server.stored(USER_A))[1] == [
            ("user", f"two {second}"),
            ("assistant", f"You said: two {second}"),
            ("user", "three"),
            ("assistant", "You said: three"),
        ]
        [event] = await capped_events(db)
        assert (event.user_id, event.session_id, event.actor) == (USER_A, sid, "supervisor")
        assert event.payload["cap"] == "messages" and event.payload["limit"] == 4
        assert event.payload["counts"]["messages"] == 2
        # The events of the trimmed exchange went with it; the session's later ones stay.
        appended = await db.read(
            lambda c: list_events(c, EventFilter(session_id=sid, types=("message.appended",)), 9)
        )
        assert [e.payload["seq_order"] for e in appended] == [3, 4, 5, 6]
        await chat(ws, "four")
    prompt = "\n".join(m.content for m in provider.prompts[-1])
    assert first not in prompt and second in prompt
    assert await SearchIndex(db).search(USER_A, [first]) == []


async def test_a_long_session_is_trimmed_below_the_cap_not_at_every_turn(tmp_path: Path) -> None:
    async with runtime(tmp_path, max_messages_per_session=20) as rt:
        told = []
        for turn in range(30):
            told.append(bool(notices(await say(rt, PRIVATE, f"turn {turn}"))))
        # Trimmed to 18 when it passes 20 (turn 11): told every second turn, not at each.
        assert told == [False] * 10 + [True, False] * 10
        held = await count(rt.db, "SELECT COUNT(*) FROM messages")
        assert 18 <= held <= 20


async def test_both_caps_at_once_give_one_notice_and_an_event_each(tmp_path: Path) -> None:
    # A cap set later applies at the user's next turn.
    async with runtime(tmp_path) as rt:
        for text in ("/new", "old a", "/new", "old b", "/new"):
            await say(rt, PRIVATE, text)
        for turn in range(5):
            await say(rt, PRIVATE, f"turn {turn}")
    async with runtime(tmp_path, max_sessions_per_user=2, max_messages_per_session=6) as rt:
        out = await say(rt, PRIVATE, "with caps now")
        [said] = notices(out)
        assert said.startswith("Your oldest session (")
        assert "The 6 oldest messages of this session were deleted" in said
        assert len(await session_ids(rt.db, PRIVATE.user_id)) == 2
        assert {e.payload["cap"] for e in await capped_events(rt.db)} == {"sessions", "messages"}


async def test_a_failing_cap_never_fails_the_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(ctx: ToolContext) -> list[Outbound]:
        raise RuntimeError("boom")

    async with runtime(tmp_path, max_messages_per_session=2) as rt:
        rt.kernel.after_turn.insert(0, broken)
        with caplog.at_level(logging.ERROR):
            out = await say(rt, PRIVATE, "hello")
        assert [e.kind for e in out][-1] is OutboundKind.DONE
        assert "after-turn work failed" in caplog.text


# --- erasure bookkeeping ------------------------------------------------------------------


async def test_residue_noted_during_an_erasure_stays_waiting(db: Database) -> None:
    await note_residue(db, 100.0)  # before any erasure ever ran: due at once
    state = await erasure_state(db, 86_400)
    assert (state.last_erased_at, state.waiting_since, state.due) == (None, 100.0, 100.0)
    await record_erasure(db, 150.0, 160.0)  # began after the note: it erased that
    assert (await erasure_state(db, 86_400)).waiting_since is None
    await note_residue(db, 210.0)
    await note_residue(db, 220.0)  # the earlier note's time stays
    await record_erasure(db, 200.0, 230.0)  # began before the note: it stays waiting
    run = await last_run(db, ERASE_TASK_NAME)
    assert run is not None and run.result == RESIDUE_WAITING
    state = await erasure_state(db, 86_400)
    assert (state.last_erased_at, state.waiting_since) == (230.0, 210.0)


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("max_sessions_per_user", "-1", "Input should be greater than or equal to 0"),
        ("max_messages_per_session", "-5", "Input should be greater than or equal to 0"),
        ("max_messages_per_session", "1", "must be 0 (no cap) or at least 2"),
        ("max_sessions_per_user", '"many"', "Input should be a valid integer"),
    ],
)
def test_a_bad_cap_is_refused_naming_the_key(
    write_config: WriteConfig, key: str, value: str, problem: str
) -> None:
    (found,) = refused(write_config, f"[session.retention]\n{key} = {value}\n")
    assert found.startswith(f"session.retention.{key}: ") and problem in found


def test_a_bad_cap_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PICOBOT_SESSION__RETENTION__MAX_SESSIONS_PER_USER", "-2")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "PICOBOT_SESSION__RETENTION__MAX_SESSIONS_PER_USER" in str(info.value)

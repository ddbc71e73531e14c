"""Verified erasure: after a purge and erase_residue, no byte of the text is left on disk.

Every test writes unique markers into every place text lives (messages, a tool message,
long messages on overflow pages, the messages' vectors, memory keys and contents,
summaries, tool record arguments and results, the user id itself), checks they reached
the files, purges, erases, then scans the raw bytes of every file under the data directory.

The webhook test posts real signed requests to a real server: replies that wait for a
retry or were given up on (a command's reply among them) go with their session, and a
replayed request brings nothing back (the replay guard keeps no content).

Markers are lowercase alphanumeric and end in 'x' (no Porter suffix does), so the FTS
term equals the marker. FTS5 prefix-compresses the terms of a leaf page (each term is
stored as its suffix after the prefix shared with the previous term), so the scan
looks for the last 20 characters of a marker, which appear verbatim wherever any of
it survives. Everything is seeded and timestamped explicitly, so a run is repeatable.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from picobot.channels.webhook.platforms.generic import GenericPlatform
from picobot.config.channels import GenericWebhookSettings
from picobot.config.settings import DataSettings, Settings
from picobot.errors import StoreUnavailable
from picobot.llm.scripted import ScriptedProvider
from picobot.privacy.controller import PrivacyController
from picobot.privacy.fact_scope import choose_facts
from picobot.privacy.scopes import Actor, SessionScope, UserScope
from picobot.runtime import open_runtime
from picobot.store.conversation.events import Event, EventFilter, list_events
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.conversation.tool_records import ToolRecordRepo
from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeStore
from picobot.store.learned.digests import DigestStore, Provenance, user_digests
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.facts import operator_filter
from picobot.store.learned.pins import PinStore
from picobot.store.retrieval.search import SearchIndex, user_token
from picobot.store.retrieval.vectors import store_vectors
from tests.channels.webhook.conftest import Webhooks, message, post_generic, rows
from tests.channels.webhook.generic_client import SECRET, signed_headers
from tests.pg.rows import rows_holding
from tests.privacy.test_purge_store import (
    DAY,
    T0,
    add_memory,
    add_message,
    add_session,
    add_summary,
    add_tool,
    integrity_ok,
)
from tests.sealed import scan_bytes, sealed_tails

TAIL = 20


def new_marker(rng: random.Random) -> str:
    return f"marker{rng.getrandbits(128):032x}x"


def scan(data_dir: Path, markers: Iterable[str]) -> dict[str, list[str]]:
    """Each marker found in any file under ``data_dir``, with the files holding it."""
    blobs = {p.name: p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file()}
    found: dict[str, list[str]] = {}
    for marker in markers:
        tail = marker[-TAIL:].encode()
        files = [name for name, data in blobs.items() if tail in data]
        if files:
            found[marker] = files
    return found


def wal_size(db: Database) -> int:
    wal = db.path.with_name(db.path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


class Person:
    """One user's data, every text carrying a fresh marker."""

    def __init__(self, name: str, rng: random.Random) -> None:
        self.rng = rng
        self.marker_in_id = new_marker(rng)
        self.user_id = f"test:{name}{self.marker_in_id}"
        # The FTS owner token spells the user id in hex.
        self.markers = [self.marker_in_id, user_token(self.user_id)]
        self.sessions: dict[str, list[str]] = {}

    def mark(self, session: str | None = None) -> str:
        marker = new_marker(self.rng)
        self.markers.append(marker)
        if session is not None:
            self.sessions.setdefault(session, []).append(marker)
        return marker

    async def fill(self, db: Database, sid: str, *, at: float = T0, messages: int = 6) -> None:
        await add_session(db, self.user_id, sid, at=at)
        for i in range(messages):
            role = "user" if i % 2 == 0 else "assistant"
            await add_message(db, sid, f"about {self.mark(sid)} and more", at=at, role=role)
        # A long message spills onto overflow pages; a tool message is not indexed.
        await add_message(db, sid, f"{self.mark(sid)} " + "lorem ipsum " * 900, at=at)
        await add_message(db, sid, f"tool said {self.mark(sid)}", at=at, role="tool")
        await self.embed(db, sid)
        await add_summary(db, sid, f"summary {self.mark(sid)}", 3, at=at)
        await add_tool(db, sid, self.user_id, f"{self.mark(sid)} {self.mark(sid)}", at=at)
        await SearchIndex(db).index_pending()  # as the runtime's indexer does

    async def embed(self, db: Database, sid: str) -> None:
        """A vector for each of ``sid``'s messages, as the vector indexer stores them.

        Each blob spells a fresh marker, so the scan finds any copy of a vector's bytes.
        """
        rows = await db.fetchall(
            "SELECT id FROM messages WHERE session_id = ? AND role IN ('user', 'assistant')",
            (sid,),
        )
        blobs = [(int(r[0]), (self.mark(sid).encode() * 20)[:768]) for r in rows]
        assert await db.write(lambda c: store_vectors(c, "all-MiniLM-L6-v2", blobs)) == len(rows)

    async def learn(self, db: Database, sid: str, at: float = T0) -> None:
        """Learned facts of ``sid``: created, replaced (history), in the recall index."""
        store = FactStore(db)
        subject = self.mark(sid)
        for replaces in (False, True):
            found = Observation(subject, "preference", f"likes {self.mark(sid)}", replaces)
            await store.observe(self.user_id, [found], session_id=sid, message_id=1, now=at)

    async def reflect(self, db: Database, sid: str, *, with_session: bool = True) -> int:
        """A reflection of ``sid`` (its marker dies with the session unless told otherwise)."""
        text = f"reflection {self.mark(sid if with_session else None)}"
        source = Provenance(sid, 1, 2, 1, 2)
        return await DigestStore(db).add_reflection(self.user_id, source, text, 5, now=T0)

    async def digest(self, db: Database, ids: list[int], session: str | None = None) -> None:
        """A level-1 digest of ``ids``; its marker dies with ``session`` (it folds it)."""
        text = f"digest {self.mark(session)}"
        rows = await db.read(lambda c: user_digests(c, self.user_id))
        folded = [d for d in rows if d.id in ids]
        assert await DigestStore(db).add_digest(self.user_id, 1, folded, text, 5, now=T0)

    async def pin(
        self, db: Database, sid: str, at: float = T0, *, with_session: bool = True
    ) -> None:
        """A pinned message in ``sid`` (its marker outlives retention, not purges)."""
        await add_message(db, sid, f"pinned {self.mark(sid if with_session else None)}", at=at)
        row = await db.fetchone("SELECT MAX(id) FROM messages WHERE session_id = ?", (sid,))
        assert row is not None
        assert await PinStore(db).set_pinned(self.user_id, [int(row[0])], True, now=at)
        await SearchIndex(db).index_pending()

    async def remember(self, db: Database, count: int = 3, at: float = T0) -> None:
        for _ in range(count):
            await add_memory(db, self.user_id, self.mark(), f"note {self.mark()}", at=at)


@pytest.fixture
def rng() -> random.Random:
    return random.Random(20240501)


async def assert_gone(db: Database, gone: list[str], kept: list[str]) -> None:
    """No byte of ``gone`` is left in any file, and every marker of ``kept`` is still there.

    On PostgreSQL the server's files are not ours to scan and sealed text is ciphertext:
    no row may hold a marker of ``gone`` in the clear (the purged user's id, say).
    """
    if not db.engine.file:
        assert await rows_holding(db, gone) == {}
        return
    data_dir = db.path.parent
    assert scan(data_dir, gone) == {}
    # What was not purged is untouched and still readable.
    assert set(scan(data_dir, kept)) == set(kept)
    await integrity_ok(db)


async def assert_erased(db: Database, gone: list[str], kept: list[str]) -> None:
    """:func:`assert_gone`, and a SQLite file's WAL is empty (checkpointed by the erasure)."""
    await assert_gone(db, gone, kept)
    if db.engine.file:
        assert wal_size(db) == 0


async def test_purged_user_leaves_no_byte_in_any_file(db: Database, rng: random.Random) -> None:
    alice, bob = Person("alice", rng), Person("bob", rng)
    # Interleaved so their rows share pages and the delete rebalances them.
    reflections: dict[str, list[int]] = {"a": [], "b": []}
    for i in range(4):
        await alice.fill(db, f"a{i}")
        await bob.fill(db, f"b{i}")
        await alice.learn(db, f"a{i}")
        await bob.learn(db, f"b{i}")
        reflections["a"].append(await alice.reflect(db, f"a{i}"))
        reflections["b"].append(await bob.reflect(db, f"b{i}"))
        await alice.pin(db, f"a{i}")
        await bob.pin(db, f"b{i}")
    await alice.digest(db, reflections["a"])
    await bob.digest(db, reflections["b"])
    await alice.remember(db)
    await bob.remember(db)
    await add_tool(db, "b0", alice.user_id, f"alice in bob's session {alice.mark()}")
    if db.engine.file:  # Sanity: before the purge every marker is on disk (file or WAL).
        everyone = alice.markers + bob.markers
        assert set(scan(db.path.parent, everyone)) == set(everyone)

    counts = await PurgeStore(db).delete_user(alice.user_id, batch_size=5)
    assert counts.sessions == 4 and counts.memories == 3 and counts.facts == 8
    assert counts.digests == 5  # four reflections and their digest
    await erase_residue(db)
    assert (
        await db.fetchone("SELECT 1 FROM message_pins WHERE user_id = ?", (alice.user_id,)) is None
    )

    await assert_erased(db, alice.markers, bob.markers)
    hits = await SearchIndex(db).search(bob.user_id, [bob.sessions["b2"][0]])
    assert [h.session_id for h in hits] == ["b2"]
    assert len(await MemoryRepo(db).list(bob.user_id)) == 3


async def test_purged_session_leaves_no_byte_in_any_file(db: Database, rng: random.Random) -> None:
    alice, bob = Person("alice", rng), Person("bob", rng)
    reflections = []
    for i in range(3):
        await alice.fill(db, f"a{i}")
        await bob.fill(db, f"b{i}")
        await alice.learn(db, f"a{i}")
        reflections.append(await alice.reflect(db, f"a{i}"))
        await alice.pin(db, f"a{i}")
    # The digest folds a1's reflection: its text goes with a1 (rebuilt later).
    await alice.digest(db, reflections, session="a1")
    await alice.remember(db)

    counts = await PurgeStore(db).delete_session("a1", batch_size=3)
    assert counts.facts == 2  # learned only in a1
    assert counts.digests == 1  # a1's reflection; the digest above is emptied, not deleted
    pinned = await db.fetchall("SELECT session_id FROM message_pins ORDER BY session_id")
    assert [r[0] for r in pinned] == ["a0", "a2"]
    await erase_residue(db)

    gone = alice.sessions["a1"]
    kept = [m for m in alice.markers + bob.markers if m not in gone]
    await assert_erased(db, gone, kept)
    assert len(await SearchIndex(db).search(alice.user_id, [alice.sessions["a2"][0]])) == 1


async def all_events(db: Database) -> list[Event]:
    return await db.read(lambda c: list_events(c, EventFilter(), 100_000))


@pytest.mark.parametrize("who", ["operator", "the user"])
async def test_a_user_purge_leaves_only_its_content_free_record(
    db: Database, rng: random.Random, who: str
) -> None:
    alice, bob = Person("alice", rng), Person("bob", rng)
    for i in range(2):
        await alice.fill(db, f"a{i}")
        await bob.fill(db, f"b{i}")
        await alice.learn(db, f"a{i}")
    await alice.remember(db)
    await ToolRecordRepo(db).add(
        "a0", alice.user_id, "memory_search", "{}", "none", True, T0, started_at=T0
    )
    mine = [e for e in await all_events(db) if e.user_id == alice.user_id]
    assert {e.type for e in mine} >= {
        "message.appended",
        "summary.updated",
        "tool.started",
        "tool.completed",
        "fact.created",
        "fact.contradicted",
        "memory.saved",
    }
    bobs = [e for e in await all_events(db) if e.user_id == bob.user_id]

    actor = Actor("cli:ops", operator=True) if who == "operator" else Actor(alice.user_id)
    controller = PrivacyController(db, batch_size=5)
    # Another operator's purge of her, still waiting: it names her, so it goes too.
    await controller.request(UserScope(alice.user_id), Actor("cli:other", operator=True))
    pending = await controller.request(UserScope(alice.user_id), actor)
    assert await controller.confirm(pending.token, actor, "y") is not None

    left = await all_events(db)
    assert [e for e in left if e.user_id == bob.user_id] == bobs
    [record] = [e for e in left if e.user_id != bob.user_id]
    assert (record.type, record.user_id, record.session_id) == ("purge.completed", None, None)
    # The operator who ran it is named; a user purging their own data is not.
    assert record.actor == ("cli:ops" if who == "operator" else None)
    assert record.payload["scope"] == "user" and record.payload["counts"]["sessions"] == 2
    await db.checkpoint()  # the purge's task_runs record came after its erasure
    await assert_erased(db, alice.markers, bob.markers)


async def test_a_session_purge_takes_the_events_of_its_session_and_facts(
    db: Database, rng: random.Random
) -> None:
    alice = Person("alice", rng)
    for i in range(2):
        await alice.fill(db, f"a{i}")
        await alice.learn(db, f"a{i}")
    store = FactStore(db)
    learned = await store.observe(
        alice.user_id,
        [Observation(None, "preference", f"likes {alice.mark('a1')}", False)],
        session_id="a1",
        message_id=1,
        now=T0,
    )
    assert await store.set_pinned(alice.user_id, learned[0].fact_id, True, now=T0) is not None
    actor = Actor(alice.user_id)
    controller = PrivacyController(db, batch_size=3)
    pending = await controller.request(SessionScope("a1"), actor)
    assert await controller.confirm(pending.token, actor, "y") is not None

    left = await all_events(db)
    assert not [e for e in left if e.session_id == "a1"]
    assert not [e for e in left if e.payload.get("fact_id") == learned[0].fact_id]
    assert [e.type for e in left if e.type.startswith("purge.")] == ["purge.completed"]
    [record] = [e for e in left if e.type == "purge.completed"]
    assert (record.user_id, record.session_id, record.actor) == (None, None, None)
    assert {e.session_id for e in left if e.type == "message.appended"} == {"a0"}
    gone = alice.sessions["a1"]
    await db.checkpoint()
    await assert_erased(db, gone, [m for m in alice.markers if m not in gone])


async def test_expired_data_leaves_no_byte_in_any_file(db: Database, rng: random.Random) -> None:
    alice, bob = Person("alice", rng), Person("bob", rng)
    old, new = T0 - 120 * DAY, T0
    await alice.fill(db, "a-old", at=old)
    await bob.fill(db, "b-old", at=old)
    await alice.fill(db, "a-new", at=new)
    await bob.fill(db, "b-new", at=new)
    await alice.remember(db, at=old)  # memories never expire
    # Derived data and pinned messages outlive retention (pins keep their session).
    await alice.digest(db, [await alice.reflect(db, "a-old", with_session=False)])
    await alice.pin(db, "a-old", at=old, with_session=False)

    counts = await PurgeStore(db).delete_older(T0 - 90 * DAY, batch_size=4)
    assert counts.sessions == 1 and counts.memories == 0 and counts.digests == 0
    await erase_residue(db)

    gone = alice.sessions["a-old"] + bob.sessions["b-old"]
    kept = [m for m in alice.markers + bob.markers if m not in gone]
    # The user ids stay too: both users still have data.
    await assert_erased(db, gone, kept)


@pytest.mark.sqlite_only
async def test_many_small_deletes_leave_no_stale_copies(db: Database) -> None:
    """Regression: secure_delete zeroes deleted cells and freed pages, but a b-tree
    rebalance leaves stale copies of moved cells in the unused space of live pages
    (seen in FTS5 segment pages of the search index). Many one-row deletes, each with
    its own FTS delete segment, and an erase after each round provoke it: on SQLite
    3.40 this exact (seeded) run leaves markers behind when erase_residue skips the
    VACUUM.
    """
    rng = random.Random(1)
    for i in range(5):
        await add_session(db, f"test:u{i}", f"s{i}")
    live: dict[str, int] = {}
    gone: list[str] = []
    for _ in range(12):
        for _ in range(50):
            marker = new_marker(rng)
            msg = await MessageRepo(db).append(
                f"s{rng.randrange(5)}", "user", f"{marker} common words", 5, created_at=T0
            )
            live[marker] = msg.id
        # One-row deletes in random places, as /forget or a per-message delete would do.
        for marker in rng.sample(sorted(live), len(live) // 3):
            await db.execute_write("DELETE FROM messages WHERE id = ?", (live.pop(marker),))
            gone.append(marker)
        await erase_residue(db)

    await assert_erased(db, gone, list(live))


@pytest.mark.sqlite_only
async def test_every_connection_zeroes_deleted_content(db: Database) -> None:
    """secure_delete also covers deletes that no erase follows (e.g. /forget)."""
    row = await db.fetchone("PRAGMA secure_delete")
    assert row is not None and row[0] == 1
    async with db.transaction() as conn, conn.execute("PRAGMA secure_delete") as cur:
        writer = await cur.fetchone()
    assert writer is not None and writer[0] == 1


async def test_checkpoint_blocked_by_a_reader_is_reported_not_ignored(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "data" / "conversations.db", busy_timeout_ms=50)
    reader = sqlite3.connect(db.path, isolation_level=None)
    try:
        marker = new_marker(random.Random(7))
        await add_session(db, "test:carol", "c1")
        await add_message(db, "c1", f"secret {marker}")
        # Another process holds a read snapshot that still needs the WAL frames.
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM messages").fetchall()
        await PurgeStore(db).delete_session("c1")
        with pytest.raises(StoreUnavailable, match="still reading"):
            await erase_residue(db)
        assert wal_size(db) > 0

        reader.execute("COMMIT")
        await erase_residue(db)
        assert wal_size(db) == 0
        assert scan(db.path.parent, [marker]) == {}
    finally:
        reader.close()
        await db.close()


@pytest.mark.sqlite_only
async def test_own_reader_never_blocks_the_checkpoint(db: Database) -> None:
    """The Database's reader finalizes every statement, so it holds no snapshot."""
    await add_session(db, "test:dave", "d1")
    for i in range(30):
        await add_message(db, "d1", f"line {i}")
    assert len(await db.fetchall("SELECT * FROM messages")) == 30
    assert await db.fetchone("SELECT id FROM messages ORDER BY id") is not None
    await PurgeStore(db).delete_session("d1")
    await erase_residue(db)
    assert wal_size(db) == 0


@pytest.mark.parametrize("attempts", [1, 5], ids=["given up", "waiting for a retry"])
async def test_purged_session_leaves_no_queued_reply_and_no_replay_behind(
    tmp_path: Path, rng: random.Random, attempts: int
) -> None:
    # Webhook replies that could not be delivered keep their text; a command's reply
    # (/summary here) quotes the session without being one of its messages.
    said, summed, msg_id = new_marker(rng), new_marker(rng), new_marker(rng)

    async def refuse(_: web.Request) -> web.Response:
        return web.json_response({}, status=500)

    refusing = web.Application()
    refusing.router.add_post("/callback", refuse)
    receiver = TestServer(refusing, host="127.0.0.1", port=0)
    await receiver.start_server()
    settings = Settings(data=DataSettings(dir=str(tmp_path / "data")))
    generic = GenericPlatform(
        GenericWebhookSettings(enabled=True, callback_url=str(receiver.make_url("/callback"))),
        SECRET,
    )
    first = json.dumps(message(f"i said {said}", msg_id, user="ann"))
    captured = signed_headers(first.encode())
    try:
        async with open_runtime(settings, provider=ScriptedProvider()) as rt:
            hooks = Webhooks(rt)
            bot = await hooks.start(generic, max_attempts=attempts, backoff_base_secs=3600)
            async with aiohttp.ClientSession() as http, contextlib.AsyncExitStack() as stack:
                stack.push_async_callback(hooks.stop_all)
                url = bot.url("generic")
                async with http.post(url, data=first, headers=captured) as resp:
                    assert resp.status == 200
                await bot.server.wait_for(lambda s: s.processed == 1)
                ((sid,),) = await rows(rt, "SELECT id FROM sessions")
                assert await SummaryRepo(rt.db).save(sid, f"sum {summed}", 1, 5, time.time())
                status, _ = await post_generic(http, url, message("/summary", "m2", user="ann"))
                assert status == 200
                await bot.server.wait_for(lambda s: s.processed == 2)
                queued = await rows(
                    rt, "SELECT picobot_open(text) AS t FROM outbound_queue WHERE t != ''"
                )
                assert any(summed in str(text) for (text,) in queued)
                # The queued reply is sealed: its ciphertext is what must go.
                sealed = await sealed_tails(rt.db, [said, summed])
                assert set(sealed) == {said, summed}
                await rt.db.checkpoint()
                assert scan_bytes(rt.db.path.parent, sealed) == {said, summed}

                counts = await PurgeStore(rt.db).delete_session(sid)
                assert counts.webhook_rows == 4  # two messages, two replies
                await erase_residue(rt.db)
                assert scan(rt.db.path.parent, [said, summed, msg_id]) == {}
                assert scan_bytes(rt.db.path.parent, sealed) == set()

                # The captured request replayed: acknowledged, not stored again.
                async with http.post(url, data=first, headers=captured) as resp:
                    assert resp.status == 200
                assert bot.server.stats.duplicates == 1
                await rt.db.checkpoint()
                assert scan(rt.db.path.parent, [said, summed, msg_id]) == {}
                assert await rows(rt, "SELECT * FROM messages") == []
    finally:
        await receiver.close()


async def test_purged_chosen_facts_leave_no_byte_in_any_file(
    db: Database, rng: random.Random
) -> None:
    alice, bob = Person("alice", rng), Person("bob", rng)
    for i in range(3):
        await alice.fill(db, f"a{i}")
        await bob.fill(db, f"b{i}")
        await alice.learn(db, f"a{i}")
        await bob.learn(db, f"b{i}")
    # learn() marks the subject, then the text of each of the two facts.
    subject = alice.sessions["a1"][-3]
    operator = Actor("cli:test", operator=True)
    controller = PrivacyController(db)
    scope = await choose_facts(db, operator_filter(subject=subject))
    pending = await controller.request(scope, operator)
    assert pending.plan.counts.facts == 2 and scope.users == 1
    result = await controller.confirm(pending.token, operator, "y")
    assert result is not None and result.counts.facts == 2

    gone = alice.sessions["a1"][-3:]
    kept = [m for m in alice.markers + bob.markers if m not in gone]
    # Not assert_erased: the purge's record is written after its erasure, so the WAL
    # holds that one page again (the scan covers the WAL too).
    await assert_gone(db, gone, kept)

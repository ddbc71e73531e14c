"""The MCP tools' rules in process (the SDK's client on an in-memory connection):
learned facts, the forget confirmation's expiry, no other user's facts."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from picobot.config.settings import DataSettings, PrivacySettings, Settings
from picobot.errors import StoreUnavailable
from picobot.mcp.access import MemoryAccess
from picobot.mcp.server import build_server
from picobot.store.db import Database
from picobot.store.learned.fact_rules import observation
from picobot.store.learned.fact_writes import FactStore
from tests.mcp_server.helpers import call, refused, token_in


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "data" / "conversations.db")
    yield database
    await database.close()


def access(db: Database, clock: Clock) -> MemoryAccess:
    settings = Settings(
        data=DataSettings(dir=str(db.path.parent)),
        privacy=PrivacySettings(confirmation_timeout_secs=60),
    )
    return MemoryAccess(settings, db, clock=clock)


async def fact_of(db: Database, user_id: str, text: str) -> int:
    fact = await FactStore(db).create(
        user_id, observation(None, "preference", text), confidence=0.8, actor="t", now=time.time()
    )
    return fact.id


async def test_a_fact_is_listed_and_forgotten_only_by_its_owner(db: Database) -> None:
    mine = await fact_of(db, "ws:alice", "likes green tea")
    theirs = await fact_of(db, "ws:bob", "likes black coffee")
    memory = access(db, Clock())
    async with (
        Client(build_server(memory, lambda ctx: "ws:alice")) as alice,
        Client(build_server(memory, lambda ctx: "ws:bob")) as bob,
    ):
        listed = await call(alice, "list_facts")
        assert f"#{mine}" in listed and "green tea" in listed and "coffee" not in listed
        # Bob's fact number is answered as if it did not exist.
        assert f"No fact #{theirs} of yours" in await refused(alice, "forget", fact=theirs)
        plan = await call(alice, "forget", fact=mine)
        assert "1 learned fact" in plan
        assert "green tea" in await call(alice, "list_facts")  # nothing deleted yet
        assert "no pending forget" in await refused(bob, "forget", confirmation=token_in(plan))
        assert f"Forgot fact #{mine}" in await call(alice, "forget", confirmation=token_in(plan))
        assert "No learned facts" in await call(alice, "list_facts")
        assert "coffee" in await call(bob, "list_facts")
        facts = await alice.read_resource("picobot://facts")
        assert "No learned facts" in str(facts.contents[0])


async def test_an_expired_confirmation_deletes_nothing(db: Database) -> None:
    clock = Clock()
    memory = access(db, clock)
    async with Client(build_server(memory, lambda ctx: "ws:alice")) as alice:
        await call(alice, "remember", key="tea", content="green")
        token = token_in(await call(alice, "forget", note="tea"))
        clock.now += 61
        assert "expired" in await refused(alice, "forget", confirmation=token)
        assert "green" in await call(alice, "list_notes")
        # Naming both, or neither, is refused before anything is planned.
        assert "exactly one" in await refused(alice, "forget", note="tea", fact=1)
        assert "exactly one" in await refused(alice, "forget")


async def test_an_unrecordable_event_does_not_undo_the_answer(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = access(db, Clock())

    async def unavailable(*_args: object) -> None:
        raise StoreUnavailable("the database is locked")

    monkeypatch.setattr(memory, "_record", unavailable)
    async with Client(build_server(memory, lambda ctx: "ws:alice")) as alice:
        assert "Saved" in await call(alice, "remember", key="tea", content="green")
        assert "green" in await call(alice, "list_notes")

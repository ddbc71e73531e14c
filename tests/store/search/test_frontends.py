"""The memory_search tool and /search: the caller's own records, compact listings."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picobot.access.context import ToolContext
from picobot.commands.search import SearchCommands
from picobot.errors import AccessDenied, UserError
from picobot.kernel.commands import CommandRouter
from picobot.messages import Identity, OutboundKind
from picobot.recall.keywords import extract_terms
from picobot.services.search import SearchService
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.retrieval.search import SearchHit, SearchIndex
from picobot.tools.base import ToolRegistry
from picobot.tools.memory_search import SNIPPET_CHARS, MemorySearchTool, format_hits, snippet

ALICE = "telegram:1001"
BOB = "telegram:2002"


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "c.db")
    sessions, messages = SessionRepo(database), MessageRepo(database)
    for user in (ALICE, BOB):
        sid = await sessions.create("telegram", user, user)
        await messages.append(sid, "user", f"The volcano trip with {user} was in May", 9)
    yield database
    await database.close()


TERMS = functools.partial(extract_terms, max_terms=8)


async def test_tool_returns_only_the_callers_hits(db: Database) -> None:
    tool = MemorySearchTool(SearchIndex(db), terms=TERMS)
    assert tool.spec.name == "memory_search"
    assert set(tool.spec.parameters["properties"]) == {"query", "top_k", "type", "session", "since"}
    text = await tool.run(ToolContext(user_id=ALICE), {"query": "volcano trip", "top_k": 5})
    assert f"with {ALICE}" in text and BOB not in text
    assert text.startswith("1. [message] ") and "session " in text
    assert await tool.run(ToolContext(user_id=ALICE), {"query": "glacier"}) == "no matches"


async def test_tool_has_no_way_to_name_another_user(db: Database) -> None:
    tool = MemorySearchTool(SearchIndex(db), terms=TERMS)
    registry = ToolRegistry([tool])
    ok, text = await registry.call(
        ToolContext(user_id=ALICE), "memory_search", f'{{"query": "volcano", "user_id": "{BOB}"}}'
    )
    assert not ok and "user_id" in text and BOB not in text.replace('"user_id"', "")


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"query": ""},
        {"query": 5},
        {"query": "volcano", "top_k": "3"},
        {"query": "volcano", "top_k": True},
        {"query": "the and of"},
    ],
)
async def test_tool_rejects_bad_arguments(db: Database, args: dict[str, object]) -> None:
    tool = MemorySearchTool(SearchIndex(db), terms=TERMS)
    with pytest.raises(UserError):
        await tool.run(ToolContext(user_id=ALICE), args)


async def test_tool_clamps_top_k_and_needs_memory_read(db: Database) -> None:
    tool = MemorySearchTool(SearchIndex(db), terms=TERMS)
    text = await tool.run(ToolContext(user_id=ALICE), {"query": "volcano", "top_k": 500})
    assert text.count("\n") == 0  # one hit, no error
    with pytest.raises(AccessDenied):
        await tool.run(ToolContext(user_id=ALICE, grants=frozenset()), {"query": "volcano"})


async def test_search_command_lists_own_hits_and_needs_words(db: Database) -> None:
    router = CommandRouter()
    SearchCommands(SearchService(SearchIndex(db), max_terms=8)).register(router)
    who = Identity("telegram", ALICE, ALICE)
    [event] = await router.dispatch(who, None, "/search Volcano")
    assert event.kind == OutboundKind.NOTICE
    assert f"with {ALICE}" in event.text and BOB not in event.text
    [event] = await router.dispatch(who, None, "/search glacier")
    assert event.text.startswith("No matches")
    for text in ("/search", "/search   ", "/search the of and"):
        with pytest.raises(UserError):
            await router.dispatch(who, None, text)


def test_format_hits_is_compact_and_cuts_long_text_around_the_match() -> None:
    long_text = "filler words " * 100 + "the aurora borealis was green " + "more " * 100
    hits = [
        SearchHit("message", 1, "abc123", 4, long_text, time.time(), 2.0),
        SearchHit("memory", 2, None, None, "home: Tromsø\nnear the fjord", time.time(), 1.0),
    ]
    lines = format_hits(hits, ["aurora"]).split("\n")
    assert len(lines) == 2
    assert "[message]" in lines[0] and "session abc123 #4" in lines[0] and "aurora" in lines[0]
    assert lines[1].endswith("saved: home: Tromsø near the fjord")
    cut = snippet(long_text, ["aurora"])
    assert len(cut) <= SNIPPET_CHARS and cut.startswith("…") and cut.endswith("…")
    assert len(snippet(long_text)) <= SNIPPET_CHARS
    assert snippet("x" * 1000, ["nowhere"]).startswith("x")
    assert len(snippet("y" * 1000, ["y" * 1000])) <= SNIPPET_CHARS


async def test_the_tool_ranks_like_the_prompts_recall_and_search_lists_matches(
    db: Database,
) -> None:
    """A match brings the answer that follows it to the model; /search lists matches only."""
    sid = await SessionRepo(db).create("telegram", "c2", ALICE)
    repo = MessageRepo(db)
    for role, text in (("user", "which harbour did we moor the ketch in?"), ("assistant", "ok")):
        await repo.append(sid, role, text, 9)
    await repo.append(sid, "user", "Porto Santo, next to the red lighthouse", 9)
    tool = MemorySearchTool(SearchIndex(db), terms=TERMS)
    listing = await tool.run(ToolContext(user_id=ALICE), {"query": "harbour ketch", "top_k": 5})
    lines = listing.splitlines()
    assert "which harbour" in lines[0] and "Porto Santo" in lines[1]
    router = CommandRouter()
    SearchCommands(SearchService(SearchIndex(db), max_terms=8)).register(router)
    events = await router.dispatch(Identity("telegram", ALICE, ALICE), sid, "/search harbour")
    assert "which harbour" in events[0].text and "Porto Santo" not in events[0].text


async def test_search_lists_only_records_that_contain_the_words(db: Database) -> None:
    # Before, 4 of 10 "matches" for Lisbon were the messages around a match, without it.
    sid = await SessionRepo(db).create("telegram", "c3", ALICE)
    repo = MessageRepo(db)
    for n in range(6):
        await repo.append(sid, "user", f"note {n}: the tram in Lisbon was late again", 9)
        await repo.append(sid, "assistant", f"Sorry to hear that, note {n}.", 9)
    router = CommandRouter()
    SearchCommands(SearchService(SearchIndex(db), max_terms=8)).register(router)
    [event] = await router.dispatch(Identity("telegram", ALICE, ALICE), sid, "/search Lisbon")
    header, *lines = event.text.splitlines()
    assert header == "Matches for: lisbon"
    assert len(lines) == 6
    assert all("Lisbon" in line for line in lines), lines

"""The memory tool and the memory commands: same rules, caller-scoped, through the kernel."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from picobot.access.context import ToolContext
from picobot.access.permissions import grants_for
from picobot.commands.memories import MemoryCommands
from picobot.config.settings import PermissionsSettings, Settings
from picobot.errors import UserError
from picobot.kernel.commands import CommandRouter
from picobot.kernel.kernel import Kernel
from picobot.kernel.prompt import WindowRetriever
from picobot.llm.base import ToolCall
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.services.notes import NoteService
from picobot.store.conversation.memories import GLOBAL_USER, MemoryRepo
from picobot.store.conversation.messages import MessageRepo
from picobot.store.db import Database
from picobot.text.tokens import CharTokenEstimator
from picobot.tools.base import ToolRegistry
from picobot.tools.memory import MemoryTool

ALICE = Identity("tui", "tui:alice", "local")
BOB = Identity("tui", "tui:bob", "local")
# No session: a turn's save is also bound to its session, which must then exist (see
# tests/kernel/test_purge_mid_turn.py); these test the tool's own rules.
ALICE_CTX = ToolContext(user_id="tui:alice", channel="tui")
BOB_CTX = ToolContext(user_id="tui:bob", channel="tui")


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated database file under tmp_path."""
    database = await Database.open(tmp_path / "c.db")
    yield database
    await database.close()


@pytest.fixture
def repo(db: Database) -> MemoryRepo:
    """The repository on the test database."""
    return MemoryRepo(db)


@pytest.fixture
def tools(repo: MemoryRepo) -> ToolRegistry:
    """A registry holding only the memory tool, with a small cap for the cap tests."""
    return ToolRegistry([MemoryTool(NoteService(repo, max_count=3, max_chars=40))])


@pytest.fixture
def router(repo: MemoryRepo) -> CommandRouter:
    """A command router with the memory commands on the same repo and limits."""
    commands = CommandRouter()
    MemoryCommands(NoteService(repo, max_count=3, max_chars=40)).register(commands)
    return commands


async def call(tools: ToolRegistry, ctx: ToolContext, **args: Any) -> tuple[bool, str]:
    """Call the memory tool the way the kernel does: JSON text through the registry."""
    return await tools.call(ctx, "memory", json.dumps(args))


def test_spec_has_the_documented_schema_and_no_user_argument(tools: ToolRegistry) -> None:
    (spec,) = tools.specs()
    props = spec.parameters["properties"]
    assert spec.name == "memory"
    assert set(props) == {"action", "key", "content", "scope"}
    assert props["action"]["enum"] == ["save", "list", "delete"]
    assert props["scope"]["enum"] == ["user", "global"]
    assert props["scope"]["default"] == "user"
    assert spec.parameters["required"] == ["action"]


async def test_save_update_list_delete(tools: ToolRegistry, repo: MemoryRepo) -> None:
    assert await call(tools, ALICE_CTX, action="save", key="pet", content="a cat") == (
        True,
        "Saved memory 'pet'.",
    )
    assert await call(tools, ALICE_CTX, action="save", key="pet", content=" a cat named Tom ") == (
        True,
        "Updated memory 'pet'.",
    )
    stored = await repo.get("tui:alice", "pet")
    assert stored is not None and stored.content == "a cat named Tom"
    ok, listing = await call(tools, ALICE_CTX, action="list")
    assert ok and listing == "Memories (1 of 3), newest first:\n- pet: a cat named Tom"
    assert await call(tools, ALICE_CTX, action="delete", key="pet") == (
        True,
        "Deleted memory 'pet'.",
    )
    assert await call(tools, ALICE_CTX, action="delete", key="pet") == (
        False,
        "There is no memory 'pet' to forget.",
    )
    assert await call(tools, ALICE_CTX, action="list") == (True, "No memories saved yet.")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("{}", "missing argument 'action'"),
        ('{"action": "purge"}', "unknown action 'purge'; use save, list or delete"),
        ('{"action": 3}', "unknown action 3; use save, list or delete"),
        ('{"action": "save", "content": "x"}', "missing argument 'key'"),
        ('{"action": "save", "key": "pet"}', "missing argument 'content'"),
        ('{"action": "save", "key": 5, "content": "x"}', "argument 'key' must be a string"),
        ('{"action": "delete"}', "missing argument 'key'"),
        ('{"action": "list", "scope": "session"}', "unknown scope 'session'; use user or global"),
        ('{"action": "save", "key": "Pet", "content": "x"}', "use lowercase letters"),
        ('{"action": "save", "key": "system_x", "content": "x"}', "reserved"),
        ('{"action": "save", "key": "pet", "content": "   "}', "needs some content"),
        ('{"action": "save", "key": "pet", "content": "' + "x" * 41 + '"}', "at most 40"),
        # JSON may escape a lone surrogate, which SQLite cannot store.
        ('{"action": "save", "key": "pet", "content": "caf\\udce9"}', "not valid Unicode"),
        ("not json", "arguments are not valid JSON"),
        ("[1]", "arguments must be a JSON object"),
    ],
)
async def test_bad_arguments_are_tool_errors_not_exceptions(
    tools: ToolRegistry, repo: MemoryRepo, arguments: str, message: str
) -> None:
    ok, text = await tools.call(ALICE_CTX, "memory", arguments)
    assert not ok
    assert message in text
    assert await repo.count("tui:alice") == 0


@pytest.mark.parametrize(
    ("args", "accepted"),
    [
        ({"action": "list"}, True),
        ({"action": "save", "key": "pet", "content": "a cat", "scope": "global"}, True),
        ({"action": "forget"}, False),
        ({"action": 3}, False),
        ({"action": "save", "key": "Pet", "content": "x"}, False),
        ({"action": "save", "key": "pet", "content": "x" * 41}, False),
        ({"action": "list", "scope": "session"}, False),
        ({"action": "list", "user_id": "tui:bob"}, False),
    ],
)
async def test_the_offered_schema_states_the_tools_rules(
    tools: ToolRegistry, args: dict[str, Any], accepted: bool
) -> None:
    # What the model is told (the spec's JSON schema) is what the tool then accepts.
    [spec] = tools.specs()
    Draft202012Validator.check_schema(spec.parameters)
    assert Draft202012Validator(spec.parameters).is_valid(args) == accepted
    settings = Settings(permissions=PermissionsSettings(global_memory_write=["tui:alice"]))
    ctx = ToolContext(user_id="tui:alice", channel="tui", grants=grants_for("tui:alice", settings))
    ok, _ = await tools.call(ctx, "memory", json.dumps(args))
    assert ok == accepted


async def test_a_user_id_argument_is_refused_and_changes_nothing(
    tools: ToolRegistry, repo: MemoryRepo
) -> None:
    ok, text = await call(
        tools, ALICE_CTX, action="save", key="pet", content="x", user_id="tui:bob"
    )
    assert not ok and "unknown argument(s) 'user_id'" in text
    assert await repo.count("tui:bob") == 0
    assert await repo.count("tui:alice") == 0


async def test_cap_through_the_tool(tools: ToolRegistry) -> None:
    for key in ("a", "b", "c"):
        assert (await call(tools, ALICE_CTX, action="save", key=key, content="x"))[0]
    assert await call(tools, ALICE_CTX, action="save", key="d", content="x") == (
        False,
        "You already have 3 memories, the most allowed; /forget one first.",
    )
    assert await call(tools, ALICE_CTX, action="save", key="a", content="y") == (
        True,
        "Updated memory 'a'.",
    )


async def test_tool_keeps_users_apart(tools: ToolRegistry, repo: MemoryRepo) -> None:
    await call(tools, ALICE_CTX, action="save", key="pet", content="a cat named Tom")
    assert await call(tools, BOB_CTX, action="list") == (True, "No memories saved yet.")
    assert await call(tools, BOB_CTX, action="delete", key="pet") == (
        False,
        "There is no memory 'pet' to forget.",
    )
    await call(tools, BOB_CTX, action="save", key="pet", content="a dog")
    alice_pet = await repo.get("tui:alice", "pet")
    assert alice_pet is not None and alice_pet.content == "a cat named Tom"
    ok, listing = await call(tools, ALICE_CTX, action="list")
    assert ok and "a cat named Tom" in listing and "a dog" not in listing


async def test_global_scope_needs_a_config_grant(tools: ToolRegistry, repo: MemoryRepo) -> None:
    args = {"action": "save", "key": "motto", "content": "be kind", "scope": "global"}
    assert await call(tools, ALICE_CTX, **args) == (
        False,
        "Permission denied: MemoryWrite{Global}.",
    )
    assert await repo.count(GLOBAL_USER) == 0

    settings = Settings(permissions=PermissionsSettings(global_memory_write=["tui:alice"]))
    granted = ToolContext(user_id="tui:alice", grants=grants_for("tui:alice", settings))
    assert await call(tools, granted, **args) == (True, "Saved shared memory 'motto'.")
    shared = await repo.get(GLOBAL_USER, "motto")
    assert shared is not None and shared.content == "be kind"
    assert await repo.count("tui:alice") == 0  # shared, not alice's own

    # Write does not imply read, and bob (not in the list) can do neither.
    assert await call(tools, granted, action="list", scope="global") == (
        False,
        "Permission denied: MemoryRead{Global}.",
    )
    bob = ToolContext(user_id="tui:bob", grants=grants_for("tui:bob", settings))
    ok, _ = await call(tools, bob, action="delete", key="motto", scope="global")
    assert not ok
    assert await repo.count(GLOBAL_USER) == 1

    reader = Settings(permissions=PermissionsSettings(global_memory_read=["tui:bob"]))
    bob_reads = ToolContext(user_id="tui:bob", grants=grants_for("tui:bob", reader))
    ok, listing = await call(tools, bob_reads, action="list", scope="global")
    assert ok and listing == "Shared memories (1 of 3), newest first:\n- motto: be kind"


async def test_tool_permission_decisions_are_logged(
    tools: ToolRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="picobot.access.context")
    settings = Settings(permissions=PermissionsSettings(global_memory_read=["tui:alice"]))
    alice = ToolContext(user_id="tui:alice", grants=grants_for("tui:alice", settings))
    await call(tools, alice, action="list", scope="global")
    await call(tools, BOB_CTX, action="list")
    await call(tools, BOB_CTX, action="save", key="k", content="x", scope="global")
    assert [r.getMessage() for r in caplog.records if r.name == "picobot.access.context"] == [
        "permission MemoryRead{GLOBAL} for tui:alice: granted (config grant)",
        "permission MemoryRead{USER} for tui:bob: granted (auto)",
        "permission MemoryWrite{GLOBAL} for tui:bob: denied",
    ]


async def test_reserved_owner_cannot_use_user_scope(tools: ToolRegistry, repo: MemoryRepo) -> None:
    spoof = ToolContext(user_id=GLOBAL_USER)
    ok, text = await call(tools, spoof, action="save", key="motto", content="x")
    assert not ok and "denied" in text
    assert await repo.count(GLOBAL_USER) == 0


async def test_commands_produce_notices(router: CommandRouter, repo: MemoryRepo) -> None:
    (saved,) = await router.dispatch(ALICE, "s1", "/remember pet: a cat named Tom")
    assert (saved.kind, saved.text, saved.session_id) == (
        OutboundKind.NOTICE,
        "Saved memory 'pet'.",
        "s1",
    )
    (updated,) = await router.dispatch(ALICE, "s1", "/remember pet:  a cat: Tom ")
    assert updated.text == "Updated memory 'pet'."
    stored = await repo.get("tui:alice", "pet")
    assert stored is not None and stored.content == "a cat: Tom"  # only the first ':' splits

    (listing,) = await router.dispatch(ALICE, "s1", "/memories")
    assert listing.kind == OutboundKind.NOTICE
    assert listing.text == "Memories (1 of 3), newest first:\n- pet: a cat: Tom"
    (forgot,) = await router.dispatch(ALICE, "s1", "/forget pet")
    assert (forgot.kind, forgot.text) == (OutboundKind.NOTICE, "Forgot memory 'pet'.")
    (empty,) = await router.dispatch(ALICE, "s1", "/memories")
    assert empty.text == "No memories saved yet. Save one with /remember key: content."
    (helptext,) = await router.dispatch(ALICE, "s1", "/help")
    for usage in ("/remember key: content", "/memories", "/forget key"):
        assert usage in helptext.text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/remember pet a cat", "Usage: /remember key: content"),
        ("/remember : a cat", "Usage: /remember key: content"),
        ("/remember", "Usage: /remember key: content"),
        ("/remember Pet: a cat", "use lowercase letters"),
        ("/remember internal_x: a cat", "reserved"),
        ("/remember pet:   ", "needs some content"),
        ("/remember pet: " + "x" * 41, "at most 40"),
        ("/forget", "Usage: /forget key"),
        ("/forget pet", "There is no memory 'pet' to forget."),
        ("/forget pet please", "is not allowed"),
    ],
)
async def test_commands_refuse_bad_input(
    router: CommandRouter, repo: MemoryRepo, text: str, message: str
) -> None:
    with pytest.raises(UserError) as info:
        await router.dispatch(ALICE, "s1", text)
    assert message in str(info.value)
    assert await repo.count("tui:alice") == 0


async def test_commands_keep_users_apart(router: CommandRouter, repo: MemoryRepo) -> None:
    await router.dispatch(ALICE, "s1", "/remember pet: a cat named Tom")
    (bob_list,) = await router.dispatch(BOB, "s2", "/memories")
    assert "a cat named Tom" not in bob_list.text
    with pytest.raises(UserError, match="no memory 'pet'"):
        await router.dispatch(BOB, "s2", "/forget pet")
    assert await repo.get("tui:alice", "pet") is not None


async def test_the_model_saves_through_the_kernel(db: Database, repo: MemoryRepo) -> None:
    save = ToolCall(
        id="c1",
        name="memory",
        arguments='{"action":"save","key":"pet","content":"a cat named Tom"}',
    )
    provider = ScriptedProvider([ScriptedTurn(tool_calls=(save,)), "Saved."])
    estimator = CharTokenEstimator()
    kernel = Kernel(
        db=db,
        provider=provider,
        retriever=WindowRetriever(MessageRepo(db), estimator, budget_tokens=4000, max_messages=20),
        estimator=estimator,
        tools=ToolRegistry([MemoryTool(NoteService(repo, max_count=50, max_chars=2000))]),
    )
    MemoryCommands(NoteService(repo, max_count=50, max_chars=2000)).register(kernel.commands)

    events = [e async for e in kernel.handle(Inbound(ALICE, "remember that my cat is Tom"))]
    assert events[-1].kind == OutboundKind.DONE and events[-1].text == "Saved."

    stored = await repo.get("tui:alice", "pet")
    assert stored is not None and stored.content == "a cat named Tom"
    rows = await db.fetchall("SELECT user_id, key FROM user_memories")
    assert [(r["user_id"], r["key"]) for r in rows] == [("tui:alice", "pet")]

    tool_message = provider.prompts[1][-1]
    assert tool_message.role == "tool" and tool_message.tool_call_id == "c1"
    assert tool_message.content.startswith('<data source="tool:memory" trust="untrusted">\n')
    assert "Saved memory 'pet'." in tool_message.content
    assert "not as instructions" in tool_message.content

    # The commands registered on the kernel see the same store, per caller.
    alice_list = [e async for e in kernel.handle(Inbound(ALICE, "/memories"))]
    assert [e.kind for e in alice_list] == [OutboundKind.NOTICE]
    assert "- pet: a cat named Tom" in alice_list[0].text
    bob_list = [e async for e in kernel.handle(Inbound(BOB, "/memories"))]
    assert bob_list[0].text.startswith("No memories saved yet.")

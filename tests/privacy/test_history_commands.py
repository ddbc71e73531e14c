"""/undo, /rewind N and /delete N through the kernel: the y/n confirmation with counts,
who may ask, what goes, and that the next prompt no longer holds what was removed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from picobot.config.settings import Settings
from picobot.kernel.prompt.retriever import MemoryRetriever
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound, OutboundKind
from picobot.runtime import Runtime, open_runtime

ALICE = Identity("whatsapp", "whatsapp:111@s.whatsapp.net", "111")
BOB = Identity("whatsapp", "whatsapp:222@s.whatsapp.net", "222")
TUI = Identity("tui", "tui:me", "local")


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider()


@pytest.fixture
async def rt(tmp_path: Path, provider: ScriptedProvider) -> AsyncIterator[Runtime]:
    settings = Settings(data={"dir": str(tmp_path / "data")})
    async with open_runtime(settings, provider=provider) as runtime:
        yield runtime


async def say(rt: Runtime, who: Identity, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(who, text))]


async def contents(rt: Runtime) -> list[str]:
    rows = await rt.db.fetchall("SELECT picobot_open(content) FROM messages ORDER BY id")
    return [str(r[0]) for r in rows]


async def message_id(rt: Runtime, content: str) -> int:
    row = await rt.db.fetchone(
        "SELECT id FROM messages WHERE picobot_open(content) = ?", (content,)
    )
    assert row is not None
    return int(row[0])


def prompt_text(provider: ScriptedProvider) -> str:
    return "\n".join(m.content for m in provider.prompts[-1])


async def test_undo_asks_with_counts_then_removes_the_last_exchange(
    rt: Runtime, provider: ScriptedProvider
) -> None:
    await say(rt, ALICE, "first kept words")
    sid = (await say(rt, ALICE, "regretted zanzibar words"))[-1].session_id
    retriever = rt.kernel.retriever
    assert isinstance(retriever, MemoryRetriever)
    assert sid in retriever._epochs  # the session's prompt prefix, kept between turns
    ask = await say(rt, ALICE, "/undo")
    assert ask[-1].kind == OutboundKind.CONFIRM_REQUEST
    assert "the last exchange" in ask[-1].text and "2 messages" in ask[-1].text
    # On a platform, the question says what PicoBot cannot delete.
    assert "WhatsApp keeps" in ask[-1].text
    done = await say(rt, ALICE, "y")
    assert "Deleted the last exchange" in done[-1].text
    assert sid not in retriever._epochs  # dropped with the messages, not at the next prune
    stored = await contents(rt)
    assert not any("zanzibar" in c for c in stored)
    assert any("first kept words" in c for c in stored)
    # The next prompt is built from what is stored: the removed text is not in it.
    await say(rt, ALICE, "what did I say?")
    text = prompt_text(provider)
    assert "zanzibar" not in text and "first kept words" in text


async def test_undo_answered_no_deletes_nothing(rt: Runtime) -> None:
    await say(rt, ALICE, "hello there")
    await say(rt, ALICE, "/undo")
    cancelled = await say(rt, ALICE, "n")
    assert cancelled[-1].text.startswith("Purge cancelled")
    assert len(await contents(rt)) == 2


async def test_undo_in_an_empty_chat_says_so(rt: Runtime) -> None:
    out = await say(rt, ALICE, "/undo")
    assert out[-1].kind == OutboundKind.ERROR
    assert "nothing to undo" in out[-1].text


async def test_tui_confirmation_has_no_platform_note_and_takes_the_token(rt: Runtime) -> None:
    await say(rt, TUI, "hello tui")
    ask = await say(rt, TUI, "/undo")
    assert ask[-1].kind == OutboundKind.CONFIRM_REQUEST
    assert "keeps" not in ask[-1].text
    assert ask[-1].token
    done = [e async for e in rt.kernel.confirm(TUI, ask[-1].token, "yes")]
    assert "Deleted" in done[-1].text
    assert await contents(rt) == []


async def test_rewind_returns_the_session_to_a_message(
    rt: Runtime, provider: ScriptedProvider
) -> None:
    await say(rt, ALICE, "alpha keep")
    await say(rt, ALICE, "bravo gone")
    await say(rt, ALICE, "charlie gone")
    keep = await message_id(rt, "alpha keep")
    ask = await say(rt, ALICE, f"/rewind {keep}")
    assert ask[-1].kind == OutboundKind.CONFIRM_REQUEST
    assert "5 messages" in ask[-1].text  # its reply, then two exchanges
    await say(rt, ALICE, "yes")
    stored = await contents(rt)
    assert stored == ["alpha keep"]
    await say(rt, ALICE, "next")
    text = prompt_text(provider)
    assert "bravo" not in text and "charlie" not in text


async def test_rewind_to_the_last_message_or_a_bad_number_is_refused(rt: Runtime) -> None:
    await say(rt, ALICE, "only")
    last = (await rt.db.fetchone("SELECT MAX(id) FROM messages"))[0]  # type: ignore[index]
    out = await say(rt, ALICE, f"/rewind {last}")
    assert "nothing after it" in out[-1].text
    out = await say(rt, ALICE, "/rewind soon")
    assert out[-1].kind == OutboundKind.ERROR and "Usage" in out[-1].text
    out = await say(rt, ALICE, "/rewind #9")  # no message number 9 in this session
    assert out[-1].text == "There is no such message of yours."


async def test_rewind_takes_a_message_number_of_the_current_session(rt: Runtime) -> None:
    await say(rt, ALICE, "alpha keep")
    await say(rt, ALICE, "bravo gone")
    ask = await say(rt, ALICE, "/rewind #2")  # the reply to "alpha keep"
    assert "2 messages" in ask[-1].text
    await say(rt, ALICE, "y")
    assert await contents(rt) == ["alpha keep", "You said: alpha keep"]


async def test_delete_removes_one_own_message_only(rt: Runtime) -> None:
    await say(rt, ALICE, "secret oops")
    await say(rt, ALICE, "fine")
    mid = await message_id(rt, "secret oops")
    # "#1": message number 1 of this session, as /search shows it.
    ask = await say(rt, ALICE, "/delete #1")
    assert ask[-1].kind == OutboundKind.CONFIRM_REQUEST
    assert f"message {mid}" in ask[-1].text and "1 message" in ask[-1].text
    await say(rt, ALICE, "y")
    stored = await contents(rt)
    assert "secret oops" not in stored and len(stored) == 3


async def test_delete_of_a_reply_or_someone_elses_message_reads_as_missing(rt: Runtime) -> None:
    await say(rt, BOB, "bob private")
    bobs = await message_id(rt, "bob private")
    await say(rt, ALICE, "mine")
    reply = (await rt.db.fetchone("SELECT MAX(id) FROM messages WHERE role = 'assistant'"))[0]  # type: ignore[index]
    missing = await say(rt, ALICE, "/delete 999999")
    others = await say(rt, ALICE, f"/delete {bobs}")
    assistant = await say(rt, ALICE, f"/delete {reply}")
    rewind_others = await say(rt, ALICE, f"/rewind {bobs}")
    texts = {missing[-1].text, others[-1].text, assistant[-1].text}
    assert texts == {"There is no such message of yours."}
    assert rewind_others[-1].kind == OutboundKind.ERROR
    assert "bob private" in await contents(rt)


async def test_another_users_yes_does_not_confirm_an_undo(rt: Runtime) -> None:
    await say(rt, ALICE, "hello")
    ask = await say(rt, ALICE, "/undo")
    token = ask[-1].token
    assert token
    stolen = [e async for e in rt.kernel.confirm(BOB, token, "y")]
    assert stolen[-1].kind == OutboundKind.ERROR
    assert len(await contents(rt)) == 2

"""Session continuity commands, ownership checks and the spoofed-session regression."""

from __future__ import annotations

import asyncio
import time

from picobot.messages import Identity, OutboundKind
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.db import Database
from tests.kernel.conftest import ALICE, BOB, KernelFactory, run


async def test_help_lists_every_command(make_kernel: KernelFactory) -> None:
    events = await run(make_kernel(), ALICE, "/help")
    assert events[-1].kind == OutboundKind.NOTICE
    for name in ("/new", "/sessions", "/resume ID", "/fork", "/help"):
        assert name in events[-1].text


async def test_unknown_command_is_not_sent_to_the_model(make_kernel: KernelFactory) -> None:
    kernel = make_kernel()
    events = await run(kernel, ALICE, "/frobnicate now")
    assert events[-1].kind == OutboundKind.ERROR
    assert "/help" in events[-1].text
    assert await kernel.sessions.list_sessions("tui:alice") == []


async def test_new_starts_a_fresh_session(make_kernel: KernelFactory) -> None:
    kernel = make_kernel()
    first = (await run(kernel, ALICE, "hello"))[0].session_id
    new = await run(kernel, ALICE, "/new")
    fresh = new[0].session_id
    assert new[0].kind == OutboundKind.SESSION and fresh != first
    again = await run(kernel, ALICE, "in the new one")
    assert again[0].session_id == fresh
    assert await kernel.messages.count(fresh or "") == 2
    assert await kernel.messages.count(first or "") == 2


async def test_sessions_lists_only_the_callers_own(make_kernel: KernelFactory) -> None:
    kernel = make_kernel()
    a1 = (await run(kernel, ALICE, "one"))[0].session_id
    await run(kernel, ALICE, "/new")
    b1 = (await run(kernel, BOB, "bob here"))[0].session_id
    listing = (await run(kernel, ALICE, "/sessions"))[-1].text
    assert a1 is not None and a1 in listing
    assert b1 is not None and b1 not in listing
    assert listing.count("\n") == 2  # header + two sessions


async def test_resume_switches_to_own_session(make_kernel: KernelFactory) -> None:
    kernel = make_kernel()
    first = (await run(kernel, ALICE, "remember this chat"))[0].session_id
    await run(kernel, ALICE, "/new")
    resumed = await run(kernel, ALICE, f"/resume {first}")
    assert resumed[0].kind == OutboundKind.SESSION and resumed[0].session_id == first
    history = await kernel.recent_history(ALICE)
    assert history.session_id == first
    assert history.messages[0].content == "remember this chat"


async def test_a_line_break_or_tab_after_the_name_separates_the_argument(
    make_kernel: KernelFactory,
) -> None:
    # Phone keyboards and pasted text put a line break where a space was meant.
    kernel = make_kernel()
    first = (await run(kernel, ALICE, "hello"))[0].session_id
    await run(kernel, ALICE, "/new")
    for text in (f"/resume\n{first}", f"/resume\t{first}", f"/RESUME \n {first}"):
        await run(kernel, ALICE, "/new")
        resumed = await run(kernel, ALICE, text)
        assert resumed[-1].kind == OutboundKind.NOTICE, text
        assert resumed[0].session_id == first


async def test_resume_of_another_users_session_is_refused(make_kernel: KernelFactory) -> None:
    kernel = make_kernel()
    alices = (await run(kernel, ALICE, "private"))[0].session_id
    bobs = (await run(kernel, BOB, "mine"))[0].session_id
    refused = await run(kernel, BOB, f"/resume {alices}")
    assert refused[-1].kind == OutboundKind.ERROR
    missing = await run(kernel, BOB, "/resume 000000000000")
    # The same words for "not yours" and "does not exist": nothing leaks.
    assert refused[-1].text.replace(str(alices), "X") == missing[-1].text.replace(
        "000000000000", "X"
    )
    assert (await kernel.recent_history(BOB)).session_id == bobs
    assert "private" not in str((await kernel.recent_history(BOB)).messages)


async def test_spoofed_session_id_in_inbound_is_refused(
    make_kernel: KernelFactory, db: Database
) -> None:
    kernel = make_kernel()
    alices = (await run(kernel, ALICE, "secret plans"))[0].session_id
    assert alices is not None
    events = await run(kernel, BOB, "let me in", session_id=alices)
    assert [e.kind for e in events] == [OutboundKind.ERROR]
    assert await kernel.messages.count(alices) == 2  # nothing written into Alice's session


async def test_fork_carries_transcript_with_parent(make_kernel: KernelFactory) -> None:
    kernel = make_kernel()
    parent = (await run(kernel, ALICE, "the start"))[0].session_id
    forked = await run(kernel, ALICE, "/fork")
    child = forked[0].session_id
    assert child is not None and child != parent
    info = await kernel.sessions.get(child)
    assert info is not None and info.parent_session_id == parent
    await run(kernel, ALICE, "only in the fork")
    assert await kernel.messages.count(child) == 4
    assert await kernel.messages.count(parent or "") == 2


async def test_fork_carries_the_parents_summary(make_kernel: KernelFactory, db: Database) -> None:
    kernel = make_kernel()
    parent = (await run(kernel, ALICE, "the start"))[0].session_id
    assert parent is not None
    saved = await SummaryRepo(db).save(parent, "Alice started something.", 2, 5, time.time())
    assert saved
    child = (await run(kernel, ALICE, "/fork"))[0].session_id
    assert child is not None
    summary = await SummaryRepo(db).get(child)
    assert summary is not None and summary.summary == "Alice started something."
    assert summary.covered_seq == 2


async def test_two_first_messages_of_a_new_chat_share_one_session(
    make_kernel: KernelFactory,
) -> None:
    kernel = make_kernel()
    first, second = await asyncio.gather(
        run(kernel, ALICE, "first message"), run(kernel, ALICE, "second message")
    )
    assert first[0].session_id == second[0].session_id
    sessions = await kernel.sessions.list_sessions("tui:alice")
    assert len(sessions) == 1 and sessions[0].message_count == 4


async def test_commands_on_a_new_chat_create_no_session(make_kernel: KernelFactory) -> None:
    kernel = make_kernel()
    carol = Identity("tui", "tui:carol", "local")
    events = await run(kernel, carol, "/fork")
    assert [e.kind for e in events] == [OutboundKind.ERROR]
    assert "no current session" in events[0].text
    await run(kernel, carol, "/help")
    assert await kernel.sessions.list_sessions("tui:carol") == []


async def test_resume_without_id_shows_usage(make_kernel: KernelFactory) -> None:
    events = await run(make_kernel(), ALICE, "/resume")
    assert events[-1].kind == OutboundKind.ERROR and "Usage" in events[-1].text

"""/purge in the TUI against the real kernel: a y/n dialog showing the counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from picobot.channels.tui import LocalBackend, PicoBotApp
from picobot.channels.tui.backend import tui_identity
from picobot.channels.tui.widgets import ConfirmScreen
from picobot.config.settings import Settings
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import open_runtime
from tests.channels.test_tui import say, settle, shown, status


@pytest.mark.parametrize(("key", "deleted"), [("y", True), ("n", False), ("escape", False)])
async def test_purge_session_dialog_shows_counts_and_obeys_the_answer(
    tmp_path: Path, key: str, deleted: bool
) -> None:
    settings = Settings(data={"dir": str(tmp_path)})
    async with open_runtime(settings, provider=ScriptedProvider()) as rt:
        backend = LocalBackend(rt.kernel, tui_identity(settings), rt.provider.model_name)
        app = PicoBotApp(backend)
        async with app.run_test() as pilot:
            await settle(pilot)
            await say(pilot, "something to forget")
            await settle(pilot)
            sid = app.session_id
            await say(pilot, "/purge session")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, ConfirmScreen)
            question = str(screen.query_one("#question").render())
            assert f"session {sid}" in question and "2 messages" in question
            await pilot.press(key)
            await settle(pilot)
            assert not isinstance(app.screen, ConfirmScreen)
            last = shown(app)[-1]
            assert last[0] == "notice"
            assert last[1].startswith("Deleted" if deleted else "Purge cancelled")
            # The status line no longer names a deleted session.
            assert (f"session {sid}" in status(app)) is not deleted
            assert ("session (new)" in status(app)) is deleted
            assert app.session_id == (None if deleted else sid)
            if deleted:
                await say(pilot, "a fresh start")
                await settle(pilot)
                assert app.session_id not in (None, sid)
                assert f"session {app.session_id}" in status(app)
        assert (await rt.kernel.sessions.get(sid or "") is None) is deleted

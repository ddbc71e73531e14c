"""/summary: show the stored summary of the current session and what it covers."""

from __future__ import annotations

import time

from picobot.kernel.commands import CommandCall, CommandRouter
from picobot.messages import Outbound, notice
from picobot.store.conversation.summaries import SummaryRepo


class SummaryCommands:
    """The /summary command, reading the caller's current session only."""

    def __init__(self, repo: SummaryRepo) -> None:
        self._repo = repo

    def register(self, router: CommandRouter) -> None:
        """Add /summary to a router."""
        router.add("summary", "/summary", "show this session's summary", self.summary)

    async def summary(self, call: CommandCall) -> list[Outbound]:
        """The stored summary of the current session, or a note that there is none."""
        # call.session_id is the caller's own current session (the kernel resolved it
        # from their identity), so no other session can be read through this command.
        sid = call.session_id
        if sid is None:
            return [notice("There is no current session yet; just start chatting.", None)]
        found = await self._repo.get(sid)
        if found is None:
            return [
                notice(
                    "This session has no summary yet. Long conversations are summarized "
                    "automatically; recent messages are always kept word for word.",
                    sid,
                )
            ]
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(found.updated_at))
        covers = "message 1" if found.covered_seq == 1 else f"messages 1-{found.covered_seq}"
        head = (
            f"Summary of session {sid} (covers {covers}; later messages are kept "
            f"word for word; updated {when}):"
        )
        return [notice(f"{head}\n{found.summary}", sid)]

"""How ``picobot status`` shows the outbound connections (Telegram polling, Slack Socket
Mode) as the running server last recorded them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picobot.cli.common import record_json

if TYPE_CHECKING:
    from picobot.store.channels.channel_state import ConnectionRecord

_TIMES = ("since", "last_update_at", "updated_at")


def describe_connections(records: list[ConnectionRecord]) -> tuple[list[str], list[str]]:
    """One line per connection, and a warning for each one retrying after errors."""
    from picobot.tasks.retention import format_ts

    lines: list[str] = []
    warnings: list[str] = []
    for r in records:
        line = f"connection {r.channel} ({r.mode}): {r.state} since {format_ts(r.since)}"
        last = "never" if r.last_update_at is None else format_ts(r.last_update_at)
        line += f", last update {last}, {r.errors} error(s)"
        if r.last_error:
            line += f" (last: {r.last_error})"
        lines.append(line + f"; recorded {format_ts(r.updated_at)}")
        if r.state == "retrying":
            warnings.append(
                f"the {r.channel} connection ({r.mode}) is failing and retrying: {r.last_error}"
            )
    return lines, warnings


def connections_json(records: list[ConnectionRecord]) -> list[dict[str, Any]]:
    """``status --json``'s ``connections``: every field, times as ISO 8601 UTC."""
    return [record_json(r, times=_TIMES) for r in records]

"""The Markdown view of a user export: the records of ``export.iter_user_records`` as a
document for people (format in docs/export-import.md)."""

from __future__ import annotations

from datetime import datetime
from typing import IO, Any


def _when(iso_text: str) -> str:
    return datetime.fromisoformat(iso_text).strftime("%Y-%m-%d %H:%M:%S UTC")


def _quote(text: str) -> str:
    # Stored text is shown as a blockquote: a line of a message that looks like a
    # heading ("## Session ...") or a list then cannot break the document's structure.
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines() or [""])


_LAYER_HEADINGS = {
    "reflection": "## Session reflections",
    "digest": "## Digests",
    "pin": "## Pinned messages",
}
# The webhook tables' records come last, each kind under one heading of its own.
_WEBHOOK_HEADINGS = {
    "webhook_message": "## Webhook messages\n\nMessages received from a chat platform; "
    "the text is kept only until the message is processed.",
    "outbound_reply": "## Queued replies\n\nReplies to a chat platform; "
    "the text is kept only until the platform took the reply.",
}


class MarkdownRenderer:
    """Writes the human-readable view of the record stream, record by record."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._memories = 0
        self._in_memories = False
        self._kind = ""

    def _emit(self, *blocks: str) -> None:
        for block in blocks:
            self._out.write(block + "\n\n")

    def _entry(self, head: str, *texts: str) -> None:
        """One item: its heading line, then each stored text as a blockquote."""
        self._emit(head, *(_quote(text) for text in texts))

    def _close_memories(self) -> None:
        if self._in_memories and self._memories == 0:
            self._emit("_No memories stored._")
        self._in_memories = False

    def write(self, record: dict[str, Any]) -> None:
        """Render one record (they arrive in the order of ``iter_user_records``)."""
        kind = record["type"]
        if kind != "memory":
            self._close_memories()
        if kind == "fact" and self._kind != "fact":
            self._emit("## Learned facts")
        if kind in _LAYER_HEADINGS and kind != self._kind:
            self._emit(_LAYER_HEADINGS[kind])
        if kind in _WEBHOOK_HEADINGS and kind != self._kind:
            self._emit(_WEBHOOK_HEADINGS[kind])
        if kind == "event" and self._kind != "event":
            self._emit("## Activity", "What happened, oldest first (ids only, no text).")
        self._kind = kind
        if kind == "export_header":
            self._emit(
                f"# PicoBot data export for `{record['user_id']}`",
                f"Exported {_when(record['exported_at'])}; all times are UTC.",
                "## Memories",
            )
            self._in_memories = True
        elif kind == "memory":
            self._memories += 1
            mark = ", sensitive" if record.get("sensitive") else ""
            head = f"**{record['key']}** (updated {_when(record['updated_at'])}{mark}):"
            self._entry(head, record["content"])
        elif kind == "fact":
            about = f" about {record['subject']}" if record["subject"] else ""
            state = ("active" if record["active"] else "inactive") + (
                ", pinned" if record["pinned"] else ""
            )
            head = (
                f"**{record['category']}**{about} (confidence {record['confidence']:.2f},"
                f" {state}, updated {_when(record['updated_at'])}):"
            )
            self._entry(head, record["text"])
        elif kind == "reflection":
            head = (
                f"**Session {record['session_id']}**, messages {record['first_message_id']} to"
                f" {record['last_message_id']} ({_when(record['created_at'])}):"
            )
            self._entry(head, record["text"])
        elif kind == "digest":
            head = (
                f"**Level {record['level']}** of {len(record['sources'])} sources"
                f" (updated {_when(record['updated_at'])}):"
            )
            self._entry(head, record["text"])
        elif kind == "pin":
            self._emit(
                f"Message {record['message_id']} of session {record['session_id']}"
                f" (pinned {_when(record['pinned_at'])})."
            )
        elif kind == "session":
            parent = record["parent_session_id"]
            self._emit(
                f"## Session {record['id']} ({_when(record['created_at'])} to "
                f"{_when(record['last_active'])})",
                f"Channel `{record['channel']}`, chat `{record['chat_id']}`"
                + (f", forked from session {parent}." if parent else "."),
            )
        elif kind == "summary":
            head = (
                f"**Summary** of messages 1 to {record['covered_seq']} "
                f"(updated {_when(record['updated_at'])}):"
            )
            self._entry(head, record["summary"])
        elif kind == "message":
            self._entry(f"**{record['role']}** ({_when(record['created_at'])}):", record["content"])
        elif kind == "tool_record":
            status = "ok" if record["ok"] else "failed"
            self._entry(
                f"**tool call** {record['name']} ({_when(record['created_at'])}, {status}):",
                "arguments: " + record["arguments"],
                "result: " + record["result"],
            )
        elif kind in _WEBHOOK_HEADINGS:
            inbound = kind == "webhook_message"
            what = f"message {record['message_id']} in" if inbound else "reply to"
            when = record["received_at"] if inbound else record["created_at"]
            self._entry(
                f"**{record['platform']}** {what} chat `{record['chat_id']}` "
                f"({_when(when)}, {record['status']}):",
                record["text"],
            )
        elif kind == "preferences":
            learning = "on" if record["learning"] else "off"
            recall = "on" if record["recall"] else "off"
            self._emit(
                "## Privacy switches",
                f"Learning {learning}, recall {recall} (changed {_when(record['updated_at'])}).",
            )
        elif kind == "event":
            where = f" in session {record['session_id']}" if record["session_id"] else ""
            by = f" by {record['actor']}" if record["actor"] else ""
            self._out.write(f"- {_when(record['at'])}: {record['event']}{where}{by}\n")

    def finish(self) -> None:
        """Close the document (a user with memories but no sessions still gets a note)."""
        self._close_memories()

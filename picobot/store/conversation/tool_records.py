"""Tool records: what tools ran in a session, for audit, export and purge.

The tool's name (the model may make one up), arguments and results are sealed with the
user's key (:mod:`picobot.store.keys.sealing`).
"""

from __future__ import annotations

from picobot.store.conversation.events import record_event_in
from picobot.store.conversation.messages import SessionGone
from picobot.store.db import Database
from picobot.store.json_redaction import redact_json


class ToolRecordRepo:
    """Append tool invocations."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(
        self,
        session_id: str,
        user_id: str,
        name: str,
        arguments: str,
        result: str,
        ok: bool,
        created_at: float,
        *,
        event_name: str | None = None,
        started_at: float | None = None,
    ) -> None:
        """Store one invocation; ``arguments`` is the raw JSON text the model sent.

        Both texts are redacted (:attr:`Database.redact`), then sealed with
        ``user_id``'s key (read them through ``picobot_open``), and so is ``name``, before
        they are stored, and
        ``tool.completed`` (record id, ok, and ``event_name``: the tool's name when the
        caller knows it is a real one, else "unknown") is recorded in the same write,
        after ``tool.started`` (the name only, ``at`` = ``started_at``) when
        ``started_at`` is given: one write per tool call, not one as it starts and one
        as it ends. Raises :class:`SessionGone` if the session no longer exists.
        """
        arguments = redact_json(arguments, self._db.redact)
        result = self._db.redact(result)
        async with self._db.transaction() as conn:
            cur = await conn.execute(
                "INSERT INTO tool_records (session_id, user_id, name, arguments, result, ok,"
                " created_at) SELECT ?1, ?2, picobot_seal(?2, ?3), picobot_seal(?2, ?4),"
                " picobot_seal(?2, ?5),"
                " ?6, ?7 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1) RETURNING id",
                (session_id, user_id, name, arguments, result, int(ok), created_at),
            )
            row = await cur.fetchone()
            if row is None:
                # Purged while the tool ran: said plainly, not as a foreign-key failure.
                raise SessionGone(session_id)
            if started_at is not None:
                await record_event_in(
                    conn,
                    "tool.started",
                    started_at,
                    user_id=user_id,
                    session_id=session_id,
                    payload={"name": event_name or "unknown"},
                )
            await record_event_in(
                conn,
                "tool.completed",
                created_at,
                user_id=user_id,
                session_id=session_id,
                payload={
                    "name": event_name or "unknown",
                    "ok": ok,
                    "tool_record_id": int(row[0]),
                },
            )

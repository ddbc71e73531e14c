"""Tool records: what tools ran in a session, for audit, export and purge."""

from __future__ import annotations

from picobot.privacy.redaction import redact_json
from picobot.store.db import Database
from picobot.store.messages import SessionGone


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
    ) -> None:
        """Store one invocation; ``arguments`` is the raw JSON text the model sent.

        Both texts are redacted (:attr:`Database.redact`) before they are stored.
        Raises :class:`SessionGone` if the session no longer exists.
        """
        arguments = redact_json(arguments, self._db.redact)
        result = self._db.redact(result)
        async with self._db.transaction() as conn:
            cur = await conn.execute(
                "INSERT INTO tool_records (session_id, user_id, name, arguments, result, ok,"
                " created_at) SELECT ?, ?, ?, ?, ?, ?, ?"
                " WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                (session_id, user_id, name, arguments, result, int(ok), created_at, session_id),
            )
            if cur.rowcount == 0:
                # Purged while the tool ran: said plainly, not as a foreign-key failure.
                raise SessionGone(session_id)

"""Users whose key is gone but whose rows are back: what a restored backup holds of
users purged after it was taken.

Their rows read as erased already; deleting them keeps a restored database from
holding (and a restored inbox from answering) what nobody can read.
"""

from __future__ import annotations

import sqlite3

from picobot.store.db import Database
from picobot.store.keys.backfill import SEALED_COLUMNS

_KID = "substr(t.{column}, 2, 8)"
"""The key id of a sealed value (after its version byte), as 8 bytes."""


async def users_without_keys(db: Database) -> list[str]:
    """Every user with a sealed row whose key the key store no longer holds, sorted."""
    ring = db.sealer.ring
    if ring is None:
        return []

    def read(conn: sqlite3.Connection) -> set[tuple[str, bytes]]:
        pairs: set[tuple[str, bytes]] = set()
        for c in SEALED_COLUMNS:
            if c.function == "picobot_tag":
                continue  # a tag names no key: the name's sealed column does
            kid = _KID.format(column=c.column)
            # A vector stored before keys is a blob too, of an even length (see Sealer).
            sealed = "" if c.function == "picobot_seal" else f" AND length(t.{c.column}) % 2 = 1"
            sql = (
                f"SELECT DISTINCT {c.owner}, {kid} FROM {c.table} t"  # noqa: S608 - constants
                f" WHERE typeof(t.{c.column}) = 'blob'{sealed}"
            )
            pairs |= {(str(r[0]), bytes(r[1])) for r in conn.execute(sql) if r[0] is not None}
        return pairs

    pairs = await db.read(read)
    known = ring.known_kids()
    return sorted({user for user, kid in pairs if int.from_bytes(kid, "big") not in known})

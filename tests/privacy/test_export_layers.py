"""Export of reflections, digests and message pins: the user's own, with provenance."""

from __future__ import annotations

import io
import json

from picobot.privacy.export import export_user
from picobot.store.conversation.messages import MessageRepo
from picobot.store.conversation.sessions import SessionRepo
from picobot.store.db import Database
from picobot.store.erasure.export import count_user_data
from picobot.store.learned.digests import DigestStore, Provenance, user_digests
from picobot.store.learned.pins import PinStore

T0 = 1_700_000_000.0
ALICE, BOB = "tui:alice", "tui:bob"


async def seed(db: Database, user: str, word: str) -> tuple[str, list[int]]:
    """A session with two messages, its reflection, a second one, their digest, a pin."""
    sid = await SessionRepo(db).create("tui", user, user)
    ids = [
        (await MessageRepo(db).append(sid, role, f"{word} {role}", 2, created_at=T0)).id
        for role in ("user", "assistant")
    ]
    store = DigestStore(db)
    source = Provenance(sid, ids[0], ids[1], 1, 2)
    first = await store.add_reflection(user, source, f"reflection about {word}", 4, now=T0)
    second = await store.add_reflection(user, source, f"more about {word}", 3, now=T0 + 1)
    await store.add_reflection(user, source, "", 0, now=T0 + 2)  # a dropped answer
    folded = [d for d in await db.read(lambda c: user_digests(c, user)) if d.id in (first, second)]
    assert await store.add_digest(user, 1, folded, f"digest of {word}", 3, now=T0 + 3)
    assert await PinStore(db).set_pinned(user, [ids[0]], True, now=T0 + 4)
    return sid, ids


async def export(db: Database, user: str, fmt: str = "jsonl") -> str:
    out = io.StringIO()
    await export_user(db, user, out, fmt=fmt)  # type: ignore[arg-type]
    return out.getvalue()


async def test_export_holds_the_users_reflections_digests_and_pins(db: Database) -> None:
    sid, ids = await seed(db, ALICE, "alicewordx")
    await seed(db, BOB, "bobwordx")
    records = [json.loads(line) for line in (await export(db, ALICE)).splitlines()]
    layers = [r for r in records if r["type"] in ("reflection", "digest", "pin")]
    assert [r["type"] for r in layers] == ["reflection", "reflection", "digest", "pin"]
    first, second, digest, pin = layers
    assert (first["session_id"], first["first_message_id"], first["last_message_id"]) == (
        sid,
        ids[0],
        ids[1],
    )
    assert first["text"] == "reflection about alicewordx"
    assert first["folded_into"] == digest["id"] == second["folded_into"]
    assert (digest["level"], digest["sources"], digest["text"]) == (
        1,
        [first["id"], second["id"]],
        "digest of alicewordx",
    )
    assert (pin["message_id"], pin["session_id"]) == (ids[0], sid)
    assert "bobwordx" not in json.dumps(records)
    stats = await count_user_data(db, ALICE)
    assert (stats.reflections, stats.digests, stats.pins) == (2, 1, 1)
    markdown = await export(db, ALICE, "markdown")
    for heading in ("## Session reflections", "## Digests", "## Pinned messages"):
        assert heading in markdown
    assert "> digest of alicewordx" in markdown and "bobwordx" not in markdown

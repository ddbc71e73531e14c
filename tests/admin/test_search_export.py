"""Admin API search and streamed JSONL export."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest

from picobot.store.erasure.export import count_user_data
from picobot.store.learned.digests import DigestStore, Provenance
from picobot.store.learned.fact_rules import Observation
from picobot.store.learned.fact_writes import FactStore
from tests.admin.helpers import (
    ALICE,
    KEY_A,
    Api,
    users,
)

# --- search and export ---------------------------------------------------------------------


async def test_search_is_scoped_to_one_user(chatted: Api) -> None:
    found = await chatted.call("GET", f"/api/v1/search?user={quote(ALICE)}&q=the+pineapple")
    assert found["terms"] == ["pineapple"]
    assert found["hits"] and all("pineapple" in h["text"].lower() for h in found["hits"])
    alice_sessions = {
        s["id"]
        for s in (await chatted.call("GET", f"/api/v1/sessions?user={quote(ALICE)}"))["sessions"]
    }
    kinds = {h["kind"] for h in found["hits"]}
    assert kinds == {"message", "memory"}
    for hit in found["hits"]:
        assert hit["session_id"] is None or hit["session_id"] in alice_sessions
    assert not any("nowhere" in h["text"] for h in found["hits"])  # Bob's message
    one = await chatted.call("GET", f"/api/v1/search?user={quote(ALICE)}&q=pineapple&limit=1")
    assert len(one["hits"]) == 1
    nothing = await chatted.call("GET", f"/api/v1/search?user={quote(ALICE)}&q=the+and")
    took = nothing.pop("took_ms")
    assert isinstance(took, float) and took >= 0
    assert nothing == {"user_id": ALICE, "terms": [], "hits": []}


async def test_search_filters_by_type_session_and_time(chatted: Api) -> None:
    db = chatted.runtime.db
    sessions = (await chatted.call("GET", f"/api/v1/sessions?user={quote(ALICE)}"))["sessions"]
    first = min(sessions, key=lambda s: s["created_at"])["id"]
    fact = Observation(None, "preference", "orders pineapple pizza on Fridays")
    await FactStore(db).observe(ALICE, [fact], session_id=first, message_id=1, now=time.time())
    source = Provenance(first, 1, 2, 1, 2)
    text = "Talked about pineapple pizza toppings."
    await DigestStore(db).add_reflection(ALICE, source, text, 5, now=time.time())
    base = f"/api/v1/search?user={quote(ALICE)}&q=pineapple"
    every = await chatted.call("GET", base)
    assert {h["kind"] for h in every["hits"]} == {"message", "memory", "fact", "reflection"}
    learned = await chatted.call("GET", base + "&type=facts,reflections")
    assert {h["kind"] for h in learned["hits"]} == {"fact", "reflection"}
    notes = await chatted.call("GET", base + "&type=notes")
    assert [h["kind"] for h in notes["hits"]] == ["memory"]
    other = max(sessions, key=lambda s: s["created_at"])["id"]
    in_first = await chatted.call("GET", base + f"&session={first}")
    assert {h["kind"] for h in in_first["hits"]} == {"message", "reflection"}
    assert all(h["session_id"] == first for h in in_first["hits"])
    in_other = await chatted.call("GET", base + f"&session={other}")
    assert in_other["hits"] == []  # the volcano session never mentions it
    future = await chatted.call("GET", base + "&since=2999-01-01")
    assert future["hits"] == []
    recent = await chatted.call("GET", base + "&since=1d")
    assert len(recent["hits"]) == len(every["hits"])
    for bad in ("type=gossip", "since=yesterday"):
        error = await chatted.call("GET", f"{base}&{bad}", expect=400)
        assert error["error"]["code"] == "invalid_parameter"


@pytest.mark.parametrize("query", ["q=pizza", f"user={quote(ALICE)}", "user=&q=pizza"])
async def test_search_needs_user_and_q(chatted: Api, query: str) -> None:
    error = await chatted.call("GET", f"/api/v1/search?{query}", expect=400)
    assert error["error"]["code"] == "missing_parameter"


async def test_export_streams_jsonl(chatted: Api) -> None:
    expected = await count_user_data(chatted.runtime.db, ALICE)
    async with chatted.client.get(users(ALICE) + "/export", headers={"X-API-Key": KEY_A}) as resp:
        assert resp.status == 200
        assert resp.content_type == "application/x-ndjson"
        assert resp.headers["Transfer-Encoding"] == "chunked"
        assert "attachment" in resp.headers["Content-Disposition"]
        records = []
        async for line in resp.content:  # line by line, as a client would
            assert line.endswith(b"\n")
            records.append(json.loads(line))
    assert records[0]["type"] == "export_header" and records[0]["user_id"] == ALICE
    kinds = [r["type"] for r in records]
    assert kinds.count("session") == expected.sessions == 2
    assert kinds.count("message") == expected.messages
    assert kinds.count("memory") == expected.memories == 1
    assert all(r.get("user_id", ALICE) == ALICE for r in records)
    assert not any("nowhere" in json.dumps(r) for r in records)


async def test_export_404_for_an_unknown_user(chatted: Api) -> None:
    error = await chatted.call("GET", users("telegram:999") + "/export", expect=404)
    assert error["error"]["code"] == "not_found"

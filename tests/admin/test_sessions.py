"""Admin API sessions: listing, filtering, pages, and one session's messages."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.admin.helpers import (
    ALICE,
    BOB,
    Api,
)

# --- sessions ------------------------------------------------------------------------------


async def test_sessions_list_filter_and_pages(chatted: Api) -> None:
    everything = await chatted.call("GET", "/api/v1/sessions")
    assert {s["user_id"] for s in everything["sessions"]} == {ALICE, BOB}
    assert len(everything["sessions"]) == 3
    assert everything["next_offset"] is None
    alice = await chatted.call("GET", f"/api/v1/sessions?user={quote(ALICE)}")
    assert [s["user_id"] for s in alice["sessions"]] == [ALICE, ALICE]
    first = await chatted.call("GET", "/api/v1/sessions?limit=2")
    assert len(first["sessions"]) == 2 and first["next_offset"] == 2
    rest = await chatted.call("GET", "/api/v1/sessions?limit=2&offset=2")
    assert len(rest["sessions"]) == 1 and rest["next_offset"] is None
    ids = [s["id"] for s in first["sessions"] + rest["sessions"]]
    assert sorted(ids) == sorted(s["id"] for s in everything["sessions"])


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=abc", "limit=201", "offset=-1", "users=x", "limit=1&limit=2"]
)
async def test_sessions_list_refuses_bad_parameters(chatted: Api, query: str) -> None:
    error = await chatted.call("GET", f"/api/v1/sessions?{query}", expect=400)
    assert error["error"]["code"] in ("invalid_parameter", "unknown_parameter")


async def test_session_detail_pages_messages_back(chatted: Api) -> None:
    await chatted.chat(BOB, "second message")
    await chatted.chat(BOB, "third message")
    listing = await chatted.call("GET", f"/api/v1/sessions?user={quote(BOB)}")
    sid = listing["sessions"][0]["id"]
    full = await chatted.call("GET", f"/api/v1/sessions/{sid}")
    assert full["session"]["message_count"] == 6
    assert [m["seq_order"] for m in full["messages"]] == [1, 2, 3, 4, 5, 6]
    assert full["messages"][0] == {**full["messages"][0], "role": "user"}
    assert full["messages"][0]["content"] == "pineapple belongs nowhere"
    newest = await chatted.call("GET", f"/api/v1/sessions/{sid}?limit=4")
    assert [m["seq_order"] for m in newest["messages"]] == [3, 4, 5, 6]
    assert newest["next_before_seq"] == 3
    older = await chatted.call("GET", f"/api/v1/sessions/{sid}?limit=4&before_seq=3")
    assert [m["seq_order"] for m in older["messages"]] == [1, 2]
    assert older["next_before_seq"] is None


async def test_session_detail_404_for_unknown_session(chatted: Api) -> None:
    error = await chatted.call("GET", "/api/v1/sessions/nope", expect=404)
    assert error["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("query", "code", "message"),
    [
        ("limit=0", "invalid_parameter", "'limit' must be at least 1."),
        ("limit=x", "invalid_parameter", "'limit' must be an integer."),
        ("user=", "invalid_parameter", "'user' must not be empty."),
        ("usr=x", "unknown_parameter", "Unknown query parameter 'usr'."),
    ],
)
async def test_parameter_errors_name_the_parameter(
    chatted: Api, query: str, code: str, message: str
) -> None:
    # ?user= must not read as "every user": an empty filter is refused, never dropped.
    error = await chatted.call("GET", f"/api/v1/sessions?{query}", expect=400)
    assert error["error"] == {"code": code, "message": message}

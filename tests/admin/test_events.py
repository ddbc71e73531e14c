"""Admin API events: the filtered, paged listing and the live Server-Sent Events stream
(over the real aiohttp server of the fixtures)."""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from picobot.config.channels import ServerSettings
from picobot.config.settings import DataSettings, Settings
from picobot.store.conversation.events import record_event
from picobot.store.db import Database
from tests.admin.helpers import ALICE, BOB, KEY_A, Api, FakeClock, start

STREAM = "/api/v1/events/stream"


async def all_events(api: Api, query: str = "") -> list[dict[str, Any]]:
    page = await api.call("GET", f"/api/v1/events?limit=500{query}")
    assert page["next_after"] is None
    events: list[dict[str, Any]] = page["events"]
    return events


async def test_events_are_listed_oldest_first_and_filtered(chatted: Api) -> None:
    events = await all_events(chatted)
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    types = {e["type"] for e in events}
    assert {"session.started", "message.appended", "memory.saved"} <= types
    # Ids, roles and counts; never what was said.
    assert "pineapple" not in json.dumps(events)

    alice = await all_events(chatted, f"&user={quote(ALICE)}")
    assert alice and {e["user_id"] for e in alice} == {ALICE}
    bob = await all_events(chatted, f"&user={quote(BOB)}")
    [bob_session] = {e["session_id"] for e in bob}
    one = await all_events(chatted, f"&session={bob_session}")
    assert one == bob
    started = await all_events(chatted, "&type=session.started,memory.saved")
    assert {e["type"] for e in started} == {"session.started", "memory.saved"}
    assert len([e for e in started if e["type"] == "session.started"]) == 3
    later = await all_events(chatted, f"&after={events[2]['id']}")
    assert later == events[3:]
    assert await all_events(chatted, "&since=4102444800") == []  # the year 2100


async def test_events_page_with_the_next_cursor(chatted: Api) -> None:
    everything = await all_events(chatted)
    seen: list[dict[str, Any]] = []
    cursor = ""
    while True:
        page = await chatted.call("GET", f"/api/v1/events?limit=3{cursor}")
        seen += page["events"]
        if page["next_after"] is None:
            break
        assert len(page["events"]) == 3
        cursor = f"&after={page['next_after']}"
    assert seen == everything


@pytest.mark.parametrize(
    "query",
    ["type=message.sent", "type=", "type=,", "limit=0", "limit=501", "after=-1", "since=x"],
)
async def test_events_refuse_bad_parameters(chatted: Api, query: str) -> None:
    error = await chatted.call("GET", f"/api/v1/events?{query}", expect=400)
    assert error["error"]["code"] == "invalid_parameter"


async def test_the_routes_need_an_operator_key(chatted: Api) -> None:
    for path in ("/api/v1/events", STREAM):
        error = await chatted.call("GET", path, key=None, expect=401)
        assert error["error"]["code"] == "unauthorized"
        await chatted.call("GET", path, key="not-a-key-0123456789", expect=401)


class SseReader:
    """Reads Server-Sent Events messages (comments are kept apart) from a response."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.comments: list[str] = []

    async def next(self) -> dict[str, str]:
        fields: dict[str, str] = {}
        while True:
            raw = await asyncio.wait_for(self.resp.content.readline(), 30)
            if not raw:
                raise EOFError("the stream ended")
            line = raw.decode().rstrip("\n")
            if not line:
                if fields:
                    return fields
                continue
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(": ")
            fields[name] = value


async def open_stream(api: Api, query: str = "", **headers: str) -> aiohttp.ClientResponse:
    resp = await api.client.get(STREAM + query, headers={"X-API-Key": KEY_A, **headers})
    assert resp.status == 200
    assert resp.content_type == "text/event-stream"
    api.contract.check("GET", STREAM, 200, resp.content_type, None)
    return resp


def check_message(api: Api, message: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(message["data"])
    api.contract.schema("Event").validate(data)
    assert message["id"] == str(data["id"]) and message["event"] == data["type"]
    return data


async def test_the_stream_resumes_after_last_event_id_and_follows_new_events(
    chatted: Api,
) -> None:
    events = await all_events(chatted)
    resume = events[-3]["id"]
    resp = await open_stream(chatted, **{"Last-Event-ID": str(resume)})
    try:
        reader = SseReader(resp)
        replayed = [check_message(chatted, await reader.next()) for _ in range(2)]
        assert replayed == events[-2:]
        # Live: a new turn's events arrive in order.
        await chatted.chat(BOB, "and another thing")
        fresh = [check_message(chatted, await reader.next()) for _ in range(2)]
        assert [(e["type"], e["payload"]["role"]) for e in fresh] == [
            ("message.appended", "user"),
            ("message.appended", "assistant"),
        ]
        assert all(e["user_id"] == BOB for e in fresh)
        assert "stream open" in reader.comments
    finally:
        resp.close()


async def test_the_stream_filters_and_sees_writes_of_another_connection(chatted: Api) -> None:
    # Without a cursor it starts with what is stored after it connected; ?after= and
    # the filters are the listing's.
    resp = await open_stream(chatted, f"?user={quote(ALICE)}&type=memory.saved,purge.completed")
    other = await Database.open(chatted.runtime.db.path)  # as a CLI process would
    try:
        reader = SseReader(resp)
        await chatted.chat(BOB, "/remember city: Porto")  # Bob's: filtered out
        await chatted.chat(ALICE, "/remember city: Lisbon")
        first = check_message(chatted, await reader.next())
        assert (first["type"], first["user_id"]) == ("memory.saved", ALICE)
        await other.write(
            lambda c: record_event(c, "memory.saved", 1.0, user_id=ALICE, payload={"memory_id": 9})
        )
        second = check_message(chatted, await reader.next())
        assert second["payload"] == {"memory_id": 9}
    finally:
        resp.close()
        await other.close()

    again = await open_stream(chatted, f"?after={first['id']}&user={quote(ALICE)}")
    try:
        assert check_message(chatted, await SseReader(again).next())["id"] == second["id"]
    finally:
        again.close()


async def test_a_stream_sees_the_purge_that_deleted_the_newest_events(chatted: Api) -> None:
    # Bob's events are the newest; his purge deletes them. The purge.completed after it
    # must get an id above the stream's cursor, or the stream never shows it.
    resp = await open_stream(chatted, "?type=purge.completed")
    try:
        planned = await chatted.call(
            "POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB}
        )
        token = planned["confirm_token"]
        await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"})
        async with asyncio.timeout(20):  # a net: with reused ids it never arrives
            done = check_message(chatted, await SseReader(resp).next())
        assert done["type"] == "purge.completed"
    finally:
        resp.close()
    assert done["id"] > max(e["id"] for e in await all_events(chatted) if e["id"] != done["id"])


@pytest.mark.parametrize("header", ["abc", "-1", "1" * 30, "1" * 25, "²", "1²"])
async def test_a_bad_last_event_id_is_refused(chatted: Api, header: str) -> None:
    error = await chatted.call("GET", STREAM, headers={"Last-Event-ID": header}, expect=400)
    assert error["error"]["code"] == "invalid_header"


async def test_streams_are_bounded_and_end_at_shutdown(tmp_path: Path, clock: FakeClock) -> None:
    settings = Settings(
        data=DataSettings(dir=str(tmp_path)), server=ServerSettings(admin_event_streams=1)
    )
    async with AsyncExitStack() as stack:
        api = await start(stack, tmp_path, clock, settings=settings)
        resp = await open_stream(api)
        reader = SseReader(resp)
        error = await api.call("GET", STREAM, expect=503)
        assert error["error"]["code"] == "too_many_streams"
        # The server's shutdown ends the open stream instead of waiting for its client.
        closing = asyncio.create_task(api.client.server.close())
        with pytest.raises(EOFError):
            await reader.next()
        await asyncio.wait_for(closing, 30)
        resp.close()

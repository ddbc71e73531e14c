"""The admin HTTP API against a real aiohttp server on 127.0.0.1:0, a real runtime over a
real SQLite file, and chat data written through the kernel; only the model is scripted.

Responses of the happy paths are validated against the schemas of the served OpenAPI
document (a small validator below), so the document and the code cannot drift apart.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from picobot.admin.api import AdminAPI, load_admin_keys, operator_actor
from picobot.admin.openapi import OPENAPI
from picobot.config.channels import ServerSettings
from picobot.config.settings import DataSettings, MemorySettings, SessionSettings, Settings
from picobot.errors import ConfigError
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound
from picobot.privacy.export import count_user_data
from picobot.runtime import Runtime, open_runtime
from picobot.store.memories import MemoryRepo
from picobot.tasks.retention import (
    ERASE_TASK_NAME,
    PURGE_ERASE_TASK_NAME,
    RESIDUE_WAITING,
    RetentionTask,
    record_run,
)

KEY_A = "admin-key-A-0123456789"
KEY_B = "other-key-B-0123456789"
WS_KEY = "chat-ws-key-0123456789"
ALICE = "telegram:42"
BOB = "whatsapp:15551234567@s.whatsapp.net"
DAY = 86_400.0


class FakeClock:
    """Wall-clock time that a test can move forward."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Api:
    """A started admin API and a client for it."""

    def __init__(self, runtime: Runtime, client: TestClient[Any, Any], clock: FakeClock) -> None:
        self.runtime = runtime
        self.client = client
        self.clock = clock

    async def call(
        self,
        method: str,
        path: str,
        *,
        key: str | None = KEY_A,
        body: Any = None,
        raw: bytes | None = None,
        expect: int = 200,
        schema: str | None = None,
    ) -> Any:
        """Send a request; assert the status; return the JSON (checked against ``schema``)."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        async with self.client.request(method, path, headers=headers, data=data) as resp:
            text = await resp.text()
            assert resp.status == expect, f"{method} {path}: {resp.status} {text}"
            if resp.status == 204:
                assert text == ""
                return None
            assert resp.content_type == "application/json"
            payload = json.loads(text)
        if expect >= 400:
            validate(payload, ref("Error"))
        elif schema is not None:
            validate(payload, ref(schema))
        return payload

    async def chat(self, user: str, text: str, channel: str = "telegram") -> list[Outbound]:
        """One message from ``user`` through the kernel; the events it produced."""
        inbound = Inbound(Identity(channel, user, user), text)
        return [event async for event in self.runtime.kernel.handle(inbound)]


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> None:
    """The subset of JSON Schema the admin document uses; AssertionError on a mismatch."""
    if "$ref" in schema:
        schema = OPENAPI["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    if "oneOf" in schema:
        passed = 0
        for option in schema["oneOf"]:
            try:
                validate(value, option, where)
            except AssertionError:
                continue
            passed += 1
        assert passed == 1, f"{where}: {passed} oneOf options match {value!r}"
        return
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if "const" in schema:
        assert value == schema["const"], f"{where}: {value!r} != {schema['const']!r}"
    types = schema.get("type")
    if types is not None:
        kinds: dict[str, type | tuple[type, ...]] = {
            "string": str,
            "integer": int,
            "number": (int, float),
            "boolean": bool,
            "object": dict,
            "array": list,
            "null": type(None),
        }
        names = [types] if isinstance(types, str) else types
        ok = any(
            isinstance(value, kinds[n]) and not (n in ("integer", "number") and value is True)
            for n in names
        )
        ok = ok and not (isinstance(value, bool) and "boolean" not in names)
        assert ok, f"{where}: {value!r} is not {types}"
    if schema.get("format") == "date-time" and isinstance(value, str):
        datetime.fromisoformat(value)
    if isinstance(value, int) and "minimum" in schema:
        assert schema["minimum"] <= value <= schema.get("maximum", value)
    if isinstance(value, dict) and "properties" in schema:
        for name in schema.get("required", []):
            assert name in value, f"{where}: missing {name!r}"
        if schema.get("additionalProperties") is False:
            extra = set(value) - set(schema["properties"])
            assert not extra, f"{where}: undocumented {sorted(extra)}"
        for name, item in value.items():
            if name in schema["properties"]:
                validate(item, schema["properties"][name], f"{where}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            validate(item, schema["items"], f"{where}[{i}]")


def users(user: str) -> str:
    return "/api/v1/users/" + quote(user, safe="")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOBOT_ADMIN_API_KEYS", f"{KEY_A}, {KEY_B}")
    monkeypatch.setenv("PICOBOT_WS_API_KEYS", WS_KEY)


async def start(
    stack: AsyncExitStack,
    tmp_path: Path,
    clock: FakeClock,
    *,
    settings: Settings | None = None,
    **kwargs: Any,
) -> Api:
    settings = settings or Settings(data=DataSettings(dir=str(tmp_path)))
    runtime = await stack.enter_async_context(open_runtime(settings, provider=ScriptedProvider()))
    if "retention" in runtime.tasks.status():
        # The runtime's own retention job runs at start; let it finish so that its
        # record never races the assertions of a test.
        await runtime.tasks.job("retention").wait_runs(1)
    admin = AdminAPI(runtime, load_admin_keys(settings.server), clock=clock, **kwargs)
    app = web.Application()
    admin.add_routes(app)
    client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    stack.push_async_callback(client.close)
    return Api(runtime, client, clock)


@pytest.fixture
async def api(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Api]:
    async with AsyncExitStack() as stack:
        yield await start(stack, tmp_path, clock)


@pytest.fixture
async def chatted(api: Api) -> Api:
    """Alice: two sessions and a memory; Bob: one session."""
    await api.chat(ALICE, "I love pineapple pizza")
    await api.chat(ALICE, "/remember food: pineapple pizza")
    await api.chat(ALICE, "/new")
    await api.chat(ALICE, "tell me about volcanoes")
    await api.chat(BOB, "pineapple belongs nowhere")
    return api


# --- keys and authentication ------------------------------------------------------------


def test_admin_keys_come_from_the_named_env_var() -> None:
    server = ServerSettings(admin_api_keys_env="MY_KEYS")
    assert load_admin_keys(server, {}) == []
    assert load_admin_keys(server, {"MY_KEYS": f" {KEY_A} ,,{KEY_B}"}) == [KEY_A, KEY_B]
    with pytest.raises(ConfigError, match="MY_KEYS: entry 2") as info:
        load_admin_keys(server, {"MY_KEYS": f"{KEY_A},short-secret"})
    assert "short-secret" not in str(info.value)
    with pytest.raises(ConfigError, match="first 8 characters"):
        load_admin_keys(server, {"MY_KEYS": "samepref-aaaaaaaaaaaa,samepref-bbbbbbbbbbbb"})
    with pytest.raises(ConfigError, match="duplicate"):
        load_admin_keys(server, {"MY_KEYS": f"{KEY_A},{KEY_A}"})
    assert operator_actor(KEY_A).id == "api:admin-ke"
    assert operator_actor(KEY_A).operator


async def test_no_keys_means_no_admin_api(tmp_path: Path) -> None:
    settings = Settings(data=DataSettings(dir=str(tmp_path)))
    async with open_runtime(settings, provider=ScriptedProvider()) as runtime:
        with pytest.raises(ConfigError, match="at least one operator key"):
            AdminAPI(runtime, [])
        with pytest.raises(ConfigError, match="at least 16"):
            AdminAPI(runtime, ["tooshort"])


def _concrete(path: str) -> str:
    return (
        path.replace("{id}", "abc")
        .replace("{user_id}", quote(ALICE, safe=""))
        .replace("{key}", "food")
        .replace("{token}", "tok")
    )


async def test_every_protected_route_refuses_missing_wrong_and_chat_keys(chatted: Api) -> None:
    protected = [
        (route.method, route.resource.canonical)
        for route in chatted.client.app.router.routes()
        if route.resource is not None and route.resource.canonical != "/healthz"
    ]
    assert len(protected) == 13
    attempts: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer wrong-key-0123456789"},
        {"X-API-Key": "wrong-key-0123456789"},
        {"Authorization": f"Bearer {WS_KEY}"},  # a chat key is not an operator key
        {"X-API-Key": WS_KEY},
        {"Authorization": f"Basic {KEY_A}"},  # only the Bearer scheme carries a key
        {"Authorization": f"Bearer {KEY_A[:-1]}"},
    ]
    body = json.dumps({"key": "x", "content": "y", "answer": "y", "scope": "user"}).encode()
    for method, path in protected:
        for headers in attempts:
            async with chatted.client.request(
                method, _concrete(path), headers=headers, data=body
            ) as resp:
                assert resp.status == 401, (method, path, headers)
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                validate(await resp.json(), ref("Error"))
    # Nothing was changed by the refused requests.
    assert await MemoryRepo(chatted.runtime.db).get(ALICE, "food") is not None


async def test_every_protected_route_refuses_an_unknown_parameter(chatted: Api) -> None:
    # A typo or an invented flag (?dry_run=true) must never be ignored, least of all
    # by a route that writes or deletes.
    protected = [
        (route.method, route.resource.canonical)
        for route in chatted.client.app.router.routes()
        if route.resource is not None and route.resource.canonical != "/healthz"
    ]
    body = {"key": "food", "content": "changed", "answer": "y", "scope": "user", "user_id": BOB}
    for method, path in protected:
        error = await chatted.call(method, _concrete(path) + "?dry_run=true", body=body, expect=400)
        assert error["error"]["code"] == "unknown_parameter", (method, path)
    memory = await MemoryRepo(chatted.runtime.db).get(ALICE, "food")
    assert memory is not None and memory.content == "pineapple pizza"
    assert (await count_user_data(chatted.runtime.db, BOB)).messages == 2


async def test_a_dry_run_flag_neither_plans_nor_confirms(chatted: Api) -> None:
    body = {"scope": "user", "user_id": BOB}
    await chatted.call("POST", "/api/v1/purge?dry_run=true", body=body, expect=400)
    planned = await chatted.call("POST", "/api/v1/purge", body=body)
    confirm = f"/api/v1/purge/{planned['confirm_token']}/confirm"
    await chatted.call("POST", confirm + "?dry_run=true", body={"answer": "y"}, expect=400)
    assert (await count_user_data(chatted.runtime.db, BOB)).messages == 2
    # The refused confirm did not consume the token.
    await chatted.call("POST", confirm, body={"answer": "n"})


async def test_bearer_and_x_api_key_both_authenticate(chatted: Api) -> None:
    for headers in (
        {"Authorization": f"Bearer {KEY_A}"},
        {"Authorization": f"bearer {KEY_B}"},
        {"X-API-Key": KEY_B},
    ):
        async with chatted.client.get("/api/v1/sessions", headers=headers) as resp:
            assert resp.status == 200


async def test_healthz_is_public(api: Api) -> None:
    async with api.client.get("/healthz") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body == {"status": "ok", "database": "ok"}
    validate(body, ref("Health"))


async def test_healthz_is_503_when_the_database_fails(api: Api) -> None:
    await api.runtime.db.close()
    async with api.client.get("/healthz") as resp:
        assert resp.status == 503
        body = await resp.json()
    assert body == {"status": "unavailable", "database": "unavailable"}


# --- sessions ------------------------------------------------------------------------------


async def test_sessions_list_filter_and_pages(chatted: Api) -> None:
    everything = await chatted.call("GET", "/api/v1/sessions", schema="SessionList")
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
    full = await chatted.call("GET", f"/api/v1/sessions/{sid}", schema="SessionDetail")
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


# --- memories ------------------------------------------------------------------------------


async def test_memory_create_update_delete(chatted: Api) -> None:
    path = users(BOB) + "/memories"
    assert (await chatted.call("GET", path, schema="MemoryList"))["memories"] == []
    created = await chatted.call(
        "POST", path, body={"key": "city", "content": " Lisbon "}, expect=201, schema="Memory"
    )
    assert created["key"] == "city" and created["content"] == "Lisbon"
    again = await chatted.call("POST", path, body={"key": "city", "content": "x"}, expect=409)
    assert again["error"]["code"] == "exists"
    updated = await chatted.call("PUT", path + "/city", body={"content": "Porto"}, schema="Memory")
    assert updated["content"] == "Porto"
    listing = await chatted.call("GET", path)
    assert [(m["key"], m["content"]) for m in listing["memories"]] == [("city", "Porto")]
    # The user sees what the operator wrote, through the chat command.
    events = await chatted.chat(BOB, "/memories")
    assert any("city: Porto" in e.text for e in events)
    await chatted.call("DELETE", path + "/city", expect=204)
    missing = await chatted.call("DELETE", path + "/city", expect=404)
    assert missing["error"]["code"] == "not_found"
    await chatted.call("PUT", path + "/city", body={"content": "x"}, expect=404)
    assert await MemoryRepo(chatted.runtime.db).get(BOB, "city") is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"key": "Bad Key", "content": "x"}, "invalid"),
        ({"key": "system_prompt", "content": "x"}, "invalid"),
        ({"key": "k" * 65, "content": "x"}, "invalid"),
        ({"key": "ok", "content": "   "}, "invalid"),
        ({"key": "ok", "content": "x" * 2001}, "invalid"),
        ({"key": "ok"}, "missing_field"),
        ({"key": "ok", "content": "x", "owner": "y"}, "unknown_field"),
        ({"key": 5, "content": "x"}, "invalid_field"),
        (["key", "content"], "invalid_body"),
    ],
)
async def test_memory_validation_matches_the_chat_rules(chatted: Api, body: Any, code: str) -> None:
    error = await chatted.call("POST", users(BOB) + "/memories", body=body, expect=400)
    assert error["error"]["code"] == code
    assert await MemoryRepo(chatted.runtime.db).count(BOB) == 0


async def test_malformed_and_oversized_bodies(chatted: Api) -> None:
    path = users(BOB) + "/memories"
    bad = await chatted.call("POST", path, raw=b'{"key": "a", ', expect=400)
    assert bad["error"]["code"] == "invalid_json"
    bad = await chatted.call("POST", path, raw=b"\xff\xfe", expect=400)
    assert bad["error"]["code"] == "invalid_json"
    # Nesting past Python's recursion limit is refused like any other malformed body.
    for deep in (b"[" * 50_000, b"[" * 30_000 + b"]" * 30_000, b'{"a":' * 12_000):
        bad = await chatted.call("POST", path, raw=deep, expect=400)
        assert bad["error"]["code"] == "invalid_json"
    big = json.dumps({"key": "a", "content": "x" * 70_000}).encode()
    error = await chatted.call("POST", path, raw=big, expect=413)
    assert error["error"]["code"] == "body_too_large"
    # The same limit holds without a Content-Length (a chunked upload).

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 8_000

    async with chatted.client.post(path, headers={"X-API-Key": KEY_A}, data=chunks()) as resp:
        assert resp.status == 413
    assert await MemoryRepo(chatted.runtime.db).count(BOB) == 0


async def test_memory_cap_and_redaction(tmp_path: Path, clock: FakeClock) -> None:
    settings = Settings(
        data=DataSettings(dir=str(tmp_path)),
        session=SessionSettings(memory=MemorySettings(max_user_memories=1)),
    )
    async with AsyncExitStack() as stack:
        api = await start(stack, tmp_path, clock, settings=settings)
        path = users(ALICE) + "/memories"
        secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
        saved = await api.call(
            "POST", path, body={"key": "token", "content": f"my key is {secret}"}, expect=201
        )
        assert secret not in saved["content"] and "[REDACTED:" in saved["content"]
        full = await api.call("POST", path, body={"key": "two", "content": "x"}, expect=409)
        assert full["error"]["code"] == "limit_reached"


async def test_memory_writes_refused_when_memories_are_off(
    tmp_path: Path, clock: FakeClock
) -> None:
    settings = Settings(
        data=DataSettings(dir=str(tmp_path)),
        session=SessionSettings(memory=MemorySettings(enable_user_memories=False)),
    )
    async with AsyncExitStack() as stack:
        api = await start(stack, tmp_path, clock, settings=settings)
        error = await api.call(
            "POST", users(ALICE) + "/memories", body={"key": "a", "content": "b"}, expect=409
        )
        assert error["error"]["code"] == "memories_disabled"


# --- search and export ---------------------------------------------------------------------


async def test_search_is_scoped_to_one_user(chatted: Api) -> None:
    found = await chatted.call(
        "GET", f"/api/v1/search?user={quote(ALICE)}&q=the+pineapple", schema="SearchResult"
    )
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
    assert nothing == {"user_id": ALICE, "terms": [], "hits": []}


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


# --- retention -----------------------------------------------------------------------------


async def test_retention_config_last_run_and_expired_now(chatted: Api) -> None:
    before = await chatted.call("GET", "/api/v1/retention", schema="Retention")
    assert before["config"] == {
        "max_age_days": 90,
        "cleanup_interval_secs": 3600,
        "erase_interval_secs": 86_400,
        "batch_size": 500,
    }
    assert before["scheduled"] is True  # the runtime runs the retention job
    assert before["expired_now"]["total"] == 0
    # 100 days later, every message has expired; memories never do.
    chatted.clock.now += 100 * DAY
    later = await chatted.call("GET", "/api/v1/retention")
    assert later["expired_now"]["messages"] == 6 and later["expired_now"]["memories"] == 0
    cutoff = datetime.fromisoformat(later["cutoff"]).timestamp()
    assert cutoff == pytest.approx(chatted.clock.now - 90 * DAY)
    report = await RetentionTask(chatted.runtime.db, max_age_days=90, clock=chatted.clock).run()
    after = await chatted.call("GET", "/api/v1/retention", schema="Retention")
    run = after["last_run"]
    assert run["ok"] is True and run["unfinished"] is False and run["error"] is None
    assert datetime.fromisoformat(run["finished_at"]).timestamp() == pytest.approx(
        chatted.clock.now
    )
    assert "6 messages" in run["result"]
    assert report.counts.messages == 6 and report.erased
    assert after["expired_now"]["total"] == 0
    erased = after["erasure"]
    assert datetime.fromisoformat(erased["last_erased_at"]).timestamp() == pytest.approx(
        chatted.clock.now
    )
    assert erased["residue_waiting_since"] is None and erased["erase_due"] is None


async def test_retention_shows_residue_waiting_for_its_erasure(chatted: Api) -> None:
    now = chatted.clock.now
    await record_run(
        chatted.runtime.db,
        ERASE_TASK_NAME,
        started_at=now - 600,
        finished_at=now - 3600,
        ok=True,
        result=RESIDUE_WAITING,
    )
    got = (await chatted.call("GET", "/api/v1/retention", schema="Retention"))["erasure"]
    assert got.pop("purge_residue_since") is None
    assert {k: datetime.fromisoformat(v).timestamp() for k, v in got.items()} == {
        "last_erased_at": pytest.approx(now - 3600),
        "residue_waiting_since": pytest.approx(now - 600),
        "erase_due": pytest.approx(now - 3600 + 86_400),
    }
    # A purge whose erasure failed: retention's next run erases what it left.
    await record_run(
        chatted.runtime.db,
        PURGE_ERASE_TASK_NAME,
        started_at=now - 60,
        finished_at=now - 50,
        ok=False,
        error="StoreUnavailable: disk full",
    )
    got = (await chatted.call("GET", "/api/v1/retention", schema="Retention"))["erasure"]
    assert datetime.fromisoformat(got["purge_residue_since"]).timestamp() == pytest.approx(now - 60)


async def test_retention_shows_a_failed_run(chatted: Api) -> None:
    await record_run(
        chatted.runtime.db,
        "retention",
        started_at=chatted.clock.now,
        finished_at=chatted.clock.now + 1,
        ok=False,
        error="StoreUnavailable: disk full",
    )
    run = (await chatted.call("GET", "/api/v1/retention", schema="Retention"))["last_run"]
    assert run["ok"] is False and run["error"] == "StoreUnavailable: disk full"
    assert run["result"] is None


# --- purge ----------------------------------------------------------------------------------


async def test_purge_user_two_step(chatted: Api) -> None:
    db = chatted.runtime.db
    stored = await count_user_data(db, ALICE)
    planned = await chatted.call(
        "POST", "/api/v1/purge", body={"scope": "user", "user_id": ALICE}, schema="PurgePlan"
    )
    counts = planned["plan"]["counts"]
    assert planned["plan"]["scope"] == "user" and planned["plan"]["user_id"] == ALICE
    assert counts["sessions"] == stored.sessions == 2
    assert counts["messages"] == stored.messages
    assert counts["memories"] == stored.memories == 1
    assert f"{stored.messages} messages" in planned["plan"]["prompt"]
    token = planned["confirm_token"]
    confirm = f"/api/v1/purge/{token}/confirm"
    # Another operator key cannot confirm it: the same answer as an unknown token.
    other = await chatted.call("POST", confirm, key=KEY_B, body={"answer": "y"}, expect=404)
    unknown = await chatted.call(
        "POST", "/api/v1/purge/nope/confirm", body={"answer": "y"}, expect=404
    )
    assert other == unknown
    assert (await count_user_data(db, ALICE)).messages == stored.messages
    done = await chatted.call("POST", confirm, body={"answer": "YES"}, schema="ConfirmResult")
    assert done["deleted"] == counts
    assert (await count_user_data(db, ALICE)).empty
    assert not (await count_user_data(db, BOB)).empty
    await chatted.call("POST", confirm, body={"answer": "y"}, expect=404)  # single use
    await chatted.call("GET", users(ALICE) + "/export", expect=404)


@pytest.mark.parametrize("answer", ["n", "no", "", "s", "yes please"])
async def test_purge_anything_but_yes_cancels(chatted: Api, answer: str) -> None:
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    token = planned["confirm_token"]
    result = await chatted.call(
        "POST", f"/api/v1/purge/{token}/confirm", body={"answer": answer}, schema="ConfirmResult"
    )
    assert result == {"cancelled": True}
    assert (await count_user_data(chatted.runtime.db, BOB)).messages == 2
    await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"}, expect=404)


async def test_purge_session_scope(chatted: Api) -> None:
    listing = await chatted.call("GET", f"/api/v1/sessions?user={quote(ALICE)}")
    sid = listing["sessions"][0]["id"]
    planned = await chatted.call(
        "POST", "/api/v1/purge", body={"scope": "session", "session_id": sid}
    )
    assert planned["plan"]["counts"]["sessions"] == 1
    assert planned["plan"]["counts"]["memories"] == 0
    token = planned["confirm_token"]
    done = await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"})
    assert done["deleted"] == planned["plan"]["counts"]
    await chatted.call("GET", f"/api/v1/sessions/{sid}", expect=404)
    remaining = await chatted.call("GET", f"/api/v1/sessions?user={quote(ALICE)}")
    assert len(remaining["sessions"]) == 1
    missing = await chatted.call(
        "POST", "/api/v1/purge", body={"scope": "session", "session_id": sid}, expect=404
    )
    assert missing["error"]["code"] == "not_found"


async def test_purge_older_than_uses_the_clock_and_keeps_memories(chatted: Api) -> None:
    recent = await chatted.call("POST", "/api/v1/purge", body={"scope": "older_than", "days": 5})
    assert recent["confirm_token"] is None and recent["expires_at"] is None
    assert recent["plan"]["counts"]["total"] == 0
    chatted.clock.now += 10 * DAY
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "older_than", "days": 5})
    assert planned["plan"]["counts"]["messages"] == 6
    assert planned["plan"]["counts"]["memories"] == 0
    token = planned["confirm_token"]
    done = await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"})
    assert done["deleted"] == planned["plan"]["counts"]
    memories = await chatted.call("GET", users(ALICE) + "/memories")
    assert [m["key"] for m in memories["memories"]] == ["food"]


async def test_purge_token_expires(chatted: Api) -> None:
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    expires = datetime.fromisoformat(planned["expires_at"]).timestamp()
    assert expires == pytest.approx(chatted.clock.now + 60)
    chatted.clock.now += 61
    token = planned["confirm_token"]
    error = await chatted.call(
        "POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"}, expect=410
    )
    assert error["error"]["code"] == "expired"
    assert (await count_user_data(chatted.runtime.db, BOB)).messages == 2
    await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"}, expect=404)


async def test_another_keys_plan_keeps_an_expired_token_expired(chatted: Api) -> None:
    planned = await chatted.call(
        "POST", "/api/v1/purge", key=KEY_B, body={"scope": "user", "user_id": BOB}
    )
    chatted.clock.now += 61
    # Key A planning anything (here: nothing to delete) must not turn B's 410 into a 404.
    await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": "nobody:1"})
    await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": ALICE})
    error = await chatted.call(
        "POST",
        f"/api/v1/purge/{planned['confirm_token']}/confirm",
        key=KEY_B,
        body={"answer": "y"},
        expect=410,
    )
    assert error["error"]["code"] == "expired"
    assert (await count_user_data(chatted.runtime.db, BOB)).messages == 2


async def test_a_new_plan_replaces_the_keys_previous_one(chatted: Api) -> None:
    first = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    other = await chatted.call(
        "POST", "/api/v1/purge", key=KEY_B, body={"scope": "user", "user_id": ALICE}
    )
    await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": ALICE})
    await chatted.call(
        "POST", f"/api/v1/purge/{first['confirm_token']}/confirm", body={"answer": "y"}, expect=404
    )
    # Key B's pending plan is its own and survives key A's new one.
    result = await chatted.call(
        "POST",
        f"/api/v1/purge/{other['confirm_token']}/confirm",
        key=KEY_B,
        body={"answer": "n"},
    )
    assert result == {"cancelled": True}


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "everything"},
        {"scope": "user"},
        {"scope": "user", "user_id": ALICE, "days": 3},
        {"scope": "older_than", "days": 0},
        {"scope": "older_than", "days": 36_501},
        {"scope": "older_than", "days": True},
        {"scope": "older_than", "days": "5"},
        {"scope": "session", "session_id": "x", "force": True},
        {},
    ],
)
async def test_purge_request_validation(chatted: Api, body: dict[str, Any]) -> None:
    error = await chatted.call("POST", "/api/v1/purge", body=body, expect=400)
    assert error["error"]["code"] in (
        "invalid_field",
        "missing_field",
        "unknown_field",
    )


async def test_confirm_needs_an_answer(chatted: Api) -> None:
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    path = f"/api/v1/purge/{planned['confirm_token']}/confirm"
    await chatted.call("POST", path, body={}, expect=400)
    await chatted.call("POST", path, body={"answer": True}, expect=400)
    # A malformed answer consumed nothing: the plan still confirms.
    result = await chatted.call("POST", path, body={"answer": "y"})
    assert result["deleted"]["messages"] == 2


# --- the document ----------------------------------------------------------------


async def test_openapi_document_matches_the_routes(api: Api) -> None:
    served = await api.call("GET", "/api/v1/openapi.json")
    assert served == json.loads(json.dumps(OPENAPI))
    assert served["openapi"].startswith("3.1")
    registered = {
        (route.method.lower(), route.resource.canonical)
        for route in api.client.app.router.routes()
        if route.resource is not None
    }
    documented = {
        (method, path)
        for path, item in served["paths"].items()
        for method in item
        if method in ("get", "post", "put", "delete", "patch")
    }
    assert registered == documented
    # Every $ref resolves.
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            refs.extend(v for k, v in node.items() if k == "$ref")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(served)
    schemas = served["components"]["schemas"]
    assert refs and all(r.rsplit("/", 1)[1] in schemas for r in refs)
    # Path parameters are declared for every templated segment.
    for path, item in served["paths"].items():
        names = {p.strip("{}") for p in path.split("/") if p.startswith("{")}
        for op in item.values():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == names, path


async def test_internal_errors_are_generic(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    async def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret detail /etc/passwd")

    monkeypatch.setattr(MemoryRepo, "list", boom)
    async with api.client.get(users(ALICE) + "/memories", headers={"X-API-Key": KEY_A}) as resp:
        assert resp.status == 500
        body = await resp.json()
    assert body["error"]["code"] == "internal"
    assert "secret" not in json.dumps(body)

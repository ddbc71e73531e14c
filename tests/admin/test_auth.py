"""Admin API keys and authentication: every protected route refuses missing, wrong and
chat keys, and unknown parameters; internal errors stay generic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from picobot.admin.api import (
    AdminAPI,
    load_admin_keys,
    operator_actor,
)
from picobot.config.channels import ServerSettings
from picobot.config.settings import DataSettings, Settings
from picobot.errors import ConfigError
from picobot.llm.scripted import ScriptedProvider
from picobot.runtime import open_runtime
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.erasure.export import count_user_data
from tests.admin.helpers import (
    ALICE,
    BOB,
    KEY_A,
    KEY_B,
    WS_KEY,
    Api,
    users,
)

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


PUBLIC = ("/healthz", "/readyz")


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
        if route.resource is not None and route.resource.canonical not in PUBLIC
    ]
    assert len(protected) == 21
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
                chatted.contract.check(
                    method, path, resp.status, resp.content_type, await resp.json()
                )
    # Nothing was changed by the refused requests.
    assert await MemoryRepo(chatted.runtime.db).get(ALICE, "food") is not None


async def test_every_protected_route_refuses_an_unknown_parameter(chatted: Api) -> None:
    # A typo or an invented flag (?dry_run=true) must never be ignored, least of all
    # by a route that writes or deletes.
    protected = [
        (route.method, route.resource.canonical)
        for route in chatted.client.app.router.routes()
        if route.resource is not None and route.resource.canonical not in PUBLIC
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


async def test_internal_errors_are_generic(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    async def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret detail /etc/passwd")

    monkeypatch.setattr(MemoryRepo, "list", boom)
    async with api.client.get(users(ALICE) + "/memories", headers={"X-API-Key": KEY_A}) as resp:
        assert resp.status == 500
        body = await resp.json()
    assert body["error"]["code"] == "internal"
    assert "secret" not in json.dumps(body)

"""The services are built once and shared by every front end; the store redacts once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from picobot.admin.api import operator_actor
from picobot.config.settings import DataSettings, Settings
from picobot.kernel.prompt import recall_block
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, OutboundKind
from picobot.privacy.redaction import Redactor
from picobot.privacy.scopes import UserScope
from picobot.runtime import open_runtime
from picobot.store.erasure.export import count_user_data
from picobot.store.retrieval import terms
from picobot.store.retrieval.search import SearchIndex
from picobot.text import tokens
from tests.admin.helpers import ALICE, BOB, KEY_A, KEY_B, WS_KEY, Api, FakeClock, start

AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"


@pytest.fixture
async def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Api]:
    monkeypatch.setenv("PICOBOT_ADMIN_API_KEYS", f"{KEY_A}, {KEY_B}")
    monkeypatch.setenv("PICOBOT_WS_API_KEYS", WS_KEY)
    async with AsyncExitStack() as stack:
        api = await start(stack, tmp_path, FakeClock())
        await api.chat(BOB, "hello there")
        yield api


async def test_a_purge_planned_through_the_services_is_confirmed_by_the_admin_api(
    api: Api,
) -> None:
    # One table of pending purges: the admin API keeps no token table of its own that
    # could disagree with it (before, it answered 404 to a token it had not issued).
    services = api.runtime.services
    pending = await services.purges.request(UserScope(BOB), operator_actor(KEY_A))
    path = f"/api/v1/purge/{pending.token}/confirm"
    await api.call("POST", path, key=KEY_B, body={"answer": "y"}, expect=404)
    done = await api.call("POST", path, body={"answer": "y"})
    assert done["deleted"]["messages"] == 2
    assert (await count_user_data(api.runtime.db, BOB)).empty


async def test_a_purge_empties_the_caches_keyed_by_texts(api: Api) -> None:
    # Stems and recalled lines are cached by the text itself, token estimates and
    # character counts by its hash: a purge leaves none of them.
    caches = (terms._stem_short, recall_block._rendered)

    def sizes() -> list[int]:
        by_hash = (tokens._script_estimate, tokens._ascii_counts)
        return [*map(len, by_hash), *(cache.cache_info().currsize for cache in caches)]

    await api.chat(BOB, "remind me about the quokkaberg appointment")
    await SearchIndex(api.runtime.db).index_pending()  # as the runtime's indexer does
    await api.chat(BOB, "the quokkaberg appointment, again", channel="slack")  # recalls it
    assert all(sizes())
    services = api.runtime.services
    pending = await services.purges.request(UserScope(BOB), operator_actor(KEY_A))
    assert await services.purges.confirm(pending.token, operator_actor(KEY_A), "y")
    assert sizes() == [0, 0, 0, 0]


async def test_a_late_confirmation_is_expired_whoever_planned_it(api: Api) -> None:
    services = api.runtime.services
    pending = await services.purges.request(UserScope(BOB), operator_actor(KEY_A))
    api.clock.now += 61
    path = f"/api/v1/purge/{pending.token}/confirm"
    error = await api.call("POST", path, body={"answer": "y"}, expect=410)
    assert error["error"]["code"] == "expired"
    assert (await count_user_data(api.runtime.db, BOB)).messages == 2


async def test_operator_memory_writes_follow_the_chat_rules(api: Api) -> None:
    notes = api.runtime.services.notes
    saved = await notes.put(ALICE, "pet", f"a cat, key {AWS_KEY}", actor="cli:op")
    # The store redacts: no front end does, and none forgets to.
    assert AWS_KEY not in saved.content and "[REDACTED" in saved.content
    events = await api.chat(ALICE, "/memories")
    assert "pet" in events[-1].text


async def test_the_store_redacts_each_message_once_and_the_model_sees_it_redacted(
    tmp_path: Path,
) -> None:
    settings = Settings(data=DataSettings(dir=str(tmp_path)))
    provider = ScriptedProvider()  # echoes what it was sent
    async with open_runtime(settings, provider=provider) as rt:
        redactor = Redactor()
        seen: list[str] = []

        def counted(text: str) -> str:
            seen.append(text)
            return redactor.redact(text)

        rt.db.redact = counted
        who = Identity("telegram", ALICE, ALICE)
        events = [e async for e in rt.kernel.handle(Inbound(who, f"my key is {AWS_KEY}"))]
    assert sum(AWS_KEY in text for text in seen) == 1  # the kernel no longer redacts first
    done = events[-1]
    assert done.kind == OutboundKind.DONE and AWS_KEY not in done.text
    assert all(AWS_KEY not in m.content for m in provider.prompts[0])

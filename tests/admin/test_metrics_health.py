"""Admin API health check, Prometheus metrics and the webhook metrics middleware."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from picobot.admin.api import (
    webhook_metrics_middleware,
)
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, Inbound
from picobot.metrics import METRICS, PicobotMetrics
from picobot.runtime import open_runtime
from picobot.tasks.retention import (
    RetentionTask,
    record_run,
)
from tests.admin.exposition import parse_exposition, sample
from tests.admin.helpers import (
    ALICE,
    BOB,
    KEY_A,
    Api,
    FakeClock,
    start,
)


async def test_healthz_is_public(api: Api) -> None:
    async with api.client.get("/healthz") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body == {"status": "ok", "database": "ok"}
    api.contract.check("GET", "/healthz", 200, resp.content_type, body)


async def test_healthz_is_503_when_the_database_fails(api: Api) -> None:
    await api.runtime.db.close()
    async with api.client.get("/healthz") as resp:
        assert resp.status == 503
        body = await resp.json()
    assert body == {"status": "unavailable", "database": "unavailable"}
    api.contract.check("GET", "/healthz", 503, resp.content_type, body)


# --- metrics and the document ----------------------------------------------------------------


async def test_metrics_exposition(tmp_path: Path, clock: FakeClock) -> None:
    metrics = PicobotMetrics()

    async def depth() -> int:
        return 3

    async with AsyncExitStack() as stack:
        api = await start(stack, tmp_path, clock, metrics=metrics, queue_depth=depth)
        metrics.purges.inc(scope="user")
        async with api.client.get("/metrics", headers={"X-API-Key": KEY_A}) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            samples = parse_exposition(await resp.text())
        assert sample(samples, "picobot_outbound_queue_depth") == 3
        assert sample(samples, "picobot_purges_total", scope="user") == 1
        # Read from task_runs at each scrape: a run recorded by anyone shows up.
        clock.now += 3600
        await RetentionTask(api.runtime.db, max_age_days=90, clock=clock).run()
        async with api.client.get("/metrics", headers={"X-API-Key": KEY_A}) as resp:
            samples = parse_exposition(await resp.text())
        assert sample(samples, "picobot_retention_last_run_timestamp") == pytest.approx(clock.now)
        assert sample(samples, "picobot_retention_last_run_ok") == 1
        await record_run(
            api.runtime.db, "retention", started_at=clock.now, finished_at=clock.now + 5, ok=False
        )
        async with api.client.get("/metrics", headers={"X-API-Key": KEY_A}) as resp:
            samples = parse_exposition(await resp.text())
        assert sample(samples, "picobot_retention_last_run_timestamp") == clock.now + 5
        assert sample(samples, "picobot_retention_last_run_ok") == 0


# Strict xfail: once the lead wires observe_turn / llm_errors / observe_purge into the
# kernel and the PrivacyController, these pass and the markers must go.


async def test_turn_counters_move_after_a_turn(api: Api) -> None:
    before = METRICS.turns.value(channel="telegram")
    count = METRICS.turn_seconds.count()
    await api.chat(ALICE, "hello there")
    samples = parse_exposition(await METRICS.render())
    assert sample(samples, "picobot_turns_total", channel="telegram") == before + 1
    assert sample(samples, "picobot_turn_seconds_count") == count + 1


async def test_llm_error_counter_moves(tmp_path: Path) -> None:
    settings = Settings(data=DataSettings(dir=str(tmp_path)))
    provider = ScriptedProvider([ScriptedTurn(fail=True)])
    async with open_runtime(settings, provider=provider) as runtime:
        before = METRICS.llm_errors.value()
        inbound = Inbound(Identity("telegram", ALICE, ALICE), "hello")
        events = [e async for e in runtime.kernel.handle(inbound)]
        assert events[-1].code == "llm_error"
        assert METRICS.llm_errors.value() == before + 1


async def test_purge_counter_moves(chatted: Api) -> None:
    before = METRICS.purges.value(scope="user")
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    token = planned["confirm_token"]
    await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"})
    assert METRICS.purges.value(scope="user") == before + 1


async def test_webhook_metrics_middleware_counts_routed_requests() -> None:
    metrics = PicobotMetrics()

    async def ok(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def refuse(request: web.Request) -> web.StreamResponse:
        raise web.HTTPForbidden()

    app = web.Application(middlewares=[webhook_metrics_middleware(metrics)])
    app.router.add_post("/webhooks/telegram", ok)
    app.router.add_post("/webhooks/slack", refuse)
    async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
        for path in ("/webhooks/telegram", "/webhooks/telegram", "/webhooks/slack"):
            async with client.post(path) as resp:
                assert resp.status in (200, 403)
        async with client.post("/webhooks/random-scan") as resp:
            assert resp.status == 404
    requests = metrics.webhook_requests
    assert requests.value(platform="telegram", status="200") == 2
    assert requests.value(platform="slack", status="403") == 1
    samples = parse_exposition(await metrics.render())
    assert not any(dict(labels).get("platform") == "random-scan" for _, labels in samples)

"""``GET /metrics`` of the admin API: a real aiohttp server on 127.0.0.1:0 over a real
runtime and SQLite file, its exposition read back with prometheus_client's parsers;
only the model is scripted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from picobot.admin.api import AdminAPI
from picobot.admin.metrics import webhook_metrics_middleware
from picobot.channels.webhook.base import PlatformMessage
from picobot.cli.serve import ServeInfo, serve
from picobot.config.settings import DataSettings, Settings
from picobot.llm.scripted import ScriptedProvider, ScriptedTurn
from picobot.messages import Identity, Inbound
from picobot.metrics import METRICS, PicobotMetrics
from picobot.runtime import Runtime, open_runtime
from picobot.store.channels.webhooks import WebhookStore
from picobot.store.retrieval.search import SearchIndex
from picobot.store.task_runs import record_run
from picobot.tasks.retention import RetentionTask
from tests.channels.webhook.generic_client import signed_headers
from tests.scrape import Samples, parse_exposition, sample, scrape

KEY = "metrics-key-0123456789"
USER = "telegram:42"
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Admin:
    """A runtime with its admin API served on a loopback port."""

    runtime: Runtime
    client: TestClient[Any, Any]

    async def scrape(self, accept: str | None = None) -> Samples:
        """GET /metrics as an operator; the samples (the text format must parse)."""
        headers = {"X-API-Key": KEY, **({"Accept": accept} if accept else {})}
        async with self.client.get("/metrics", headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            openmetrics = resp.content_type == "application/openmetrics-text"
            return parse_exposition(await resp.text(), openmetrics=openmetrics)

    async def chat(self, text: str) -> None:
        """One turn of USER through the kernel."""
        inbound = Inbound(Identity("telegram", USER, USER), text)
        async for _ in self.runtime.kernel.handle(inbound):
            pass


async def serve_admin(
    stack: AsyncExitStack, tmp_path: Path, *, provider: ScriptedProvider | None = None, **kw: Any
) -> Admin:
    settings = Settings(data=DataSettings(dir=str(tmp_path)))
    runtime = await stack.enter_async_context(
        open_runtime(settings, provider=provider or ScriptedProvider())
    )
    # The retention job runs at start; its record must not race the assertions.
    await runtime.tasks.job("retention").wait_runs(1)
    app = web.Application()
    AdminAPI(runtime, [KEY], **kw).add_routes(app)
    client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    stack.push_async_callback(client.close)
    return Admin(runtime, client)


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[Admin]:
    async with AsyncExitStack() as stack:
        yield await serve_admin(stack, tmp_path)


async def test_metrics_need_an_operator_key(admin: Admin) -> None:
    async with admin.client.get("/metrics") as resp:
        assert resp.status == 401
    async with admin.client.get("/metrics", headers={"X-API-Key": "x" * 22}) as resp:
        assert resp.status == 401
    async with admin.client.get("/metrics?x=1", headers={"X-API-Key": KEY}) as resp:
        assert resp.status == 400


async def test_text_format_by_default_with_process_metrics(admin: Admin) -> None:
    async with admin.client.get("/metrics", headers={"X-API-Key": KEY}) as resp:
        assert resp.headers["Content-Type"] == TEXT_FORMAT
        samples = parse_exposition(await resp.text())
    names = {name for name, _ in samples}
    assert {"process_resident_memory_bytes", "python_gc_collections_total"} <= names
    assert {"python_info", "picobot_turn_seconds_count", "picobot_outbound_queue_depth"} <= names


async def test_openmetrics_when_the_accept_header_asks(admin: Admin) -> None:
    headers = {"X-API-Key": KEY, "Accept": "application/openmetrics-text; version=1.0.0"}
    async with admin.client.get("/metrics", headers=headers) as resp:
        assert resp.headers["Content-Type"].startswith(
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        )
        text = await resp.text()
    assert text.endswith("# EOF\n")
    assert "# TYPE picobot_llm_errors counter" in text
    assert sample(parse_exposition(text, openmetrics=True), "picobot_inbox_queue_depth") == 0


async def test_retention_last_run_comes_from_task_runs(tmp_path: Path) -> None:
    metrics = PicobotMetrics()
    async with AsyncExitStack() as stack:
        api = await serve_admin(stack, tmp_path, metrics=metrics)
        db = api.runtime.db
        samples = await api.scrape()
        # The runtime's own run at start is on record.
        assert sample(samples, "picobot_retention_last_run_ok") == 1
        # A run recorded by anyone (another process, the CLI) shows up at the next scrape.
        later = samples[("picobot_retention_last_run_timestamp_seconds", frozenset())] + 3600
        await RetentionTask(db, max_age_days=90, clock=lambda: later).run()
        samples = await api.scrape()
        assert sample(samples, "picobot_retention_last_run_timestamp_seconds") == later
        await record_run(db, "retention", started_at=later, finished_at=later + 5, ok=False)
        samples = await api.scrape()
        assert sample(samples, "picobot_retention_last_run_timestamp_seconds") == later + 5
        assert sample(samples, "picobot_retention_last_run_ok") == 0


async def test_webhook_queue_depths_reflect_pending_rows(admin: Admin) -> None:
    store = WebhookStore(admin.runtime.db)
    before = await admin.scrape()
    assert sample(before, "picobot_inbox_queue_depth") == 0
    assert sample(before, "picobot_outbound_queue_depth") == 0
    ids = []
    for n in range(3):
        msg = PlatformMessage(f"m{n}", "telegram:7", "7", "7", f"question {n}")
        ids.append(await store.accept("telegram", msg))
    samples = await admin.scrape()
    assert sample(samples, "picobot_inbox_queue_depth") == 3
    assert sample(samples, "picobot_outbound_queue_depth") == 0
    inbox_id = ids[0]
    assert inbox_id is not None
    await store.mark_processed(
        inbox_id,
        ["part one", "part two"],
        platform="telegram",
        reply_to={},
        user_id="7",
        chat_id="7",
    )
    samples = await admin.scrape()
    assert sample(samples, "picobot_inbox_queue_depth") == 2
    assert sample(samples, "picobot_outbound_queue_depth") == 2
    outbound = await store.outbound_heads(10, ["telegram"])
    await store.mark_sent(outbound[0].id, 0.0)
    assert sample(await admin.scrape(), "picobot_outbound_queue_depth") == 1


async def test_search_queue_depth_reflects_messages_not_yet_indexed(admin: Admin) -> None:
    db = admin.runtime.db
    indexer = admin.runtime.tasks.job("search-index")
    # Holding the compaction lock pauses the runtime's background indexing; a run that
    # began before is waited for (runs are counted when they finish).
    async with db.search_compaction:
        indexer.wake()
        await indexer.wait_runs(indexer.status.runs + 1)
        await admin.chat("hello there")
        assert sample(await admin.scrape(), "picobot_search_queue_depth") == 2
    await SearchIndex(db).index_pending(None)
    assert sample(await admin.scrape(), "picobot_search_queue_depth") == 0


async def test_a_queue_that_cannot_be_read_has_no_sample_and_the_rest_is_served(
    admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    # A damaged schema: the recall queue's table is gone.
    await admin.runtime.db.execute_write("DROP TABLE search_pending")
    samples = await admin.scrape()
    assert ("picobot_search_queue_depth", frozenset()) not in samples
    assert sample(samples, "picobot_outbound_queue_depth") == 0
    assert sample(samples, "picobot_inbox_queue_depth") == 0
    assert "could not read picobot_search_queue_depth" in caplog.text


async def test_job_runs_and_failures_are_counted(admin: Admin) -> None:
    tasks = admin.runtime.tasks
    before = await admin.scrape()
    assert sample(before, "picobot_job_runs_total", job="retention") >= 1
    assert sample(before, "picobot_job_failures_total", job="retention") == 0
    assert sample(before, "picobot_background_task_failures_total") == 0

    async def broken() -> None:
        raise RuntimeError("always")

    job = tasks.every("flaky", 3600, broken, run_at_start=True)
    await job.wait_runs(1)
    tasks.spawn("one-off", broken())
    await tasks.join()
    after = await admin.scrape()
    assert sample(after, "picobot_job_runs_total", job="flaky") == 1
    assert sample(after, "picobot_job_failures_total", job="flaky") == 1
    assert sample(after, "picobot_background_task_failures_total") == 1


async def test_collectors_of_the_server_are_served(tmp_path: Path) -> None:
    class Answers:
        def collect(self) -> list[Metric]:
            return [GaugeMetricFamily("picobot_test_answer", "The answer.", value=42)]

    async with AsyncExitStack() as stack:
        api = await serve_admin(stack, tmp_path, collectors=[Answers()])
        assert sample(await api.scrape(), "picobot_test_answer") == 42


async def test_turn_counters_move_after_a_turn(admin: Admin) -> None:
    before = scrape(METRICS)
    turns = before.get(("picobot_turns_total", frozenset({("channel", "telegram")})), 0.0)
    await admin.chat("hello there")
    after = await admin.scrape()
    assert sample(after, "picobot_turns_total", channel="telegram") == turns + 1
    assert sample(after, "picobot_turn_seconds_count") == (
        sample(before, "picobot_turn_seconds_count") + 1
    )


async def test_llm_error_counter_moves(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        provider = ScriptedProvider([ScriptedTurn(fail=True)])
        api = await serve_admin(stack, tmp_path, provider=provider)
        before = sample(await api.scrape(), "picobot_llm_errors_total")
        await api.chat("hello")
        assert sample(await api.scrape(), "picobot_llm_errors_total") == before + 1


async def test_purge_counter_moves(admin: Admin) -> None:
    await admin.chat("something to purge")
    key = frozenset({("scope", "user")})
    before = (await admin.scrape()).get(("picobot_purges_total", key), 0.0)
    headers = {"X-API-Key": KEY}
    body = {"scope": "user", "user_id": USER}
    async with admin.client.post("/api/v1/purge", json=body, headers=headers) as resp:
        token = (await resp.json())["confirm_token"]
    path = f"/api/v1/purge/{token}/confirm"
    async with admin.client.post(path, json={"answer": "y"}, headers=headers) as resp:
        assert resp.status == 200
    assert sample(await admin.scrape(), "picobot_purges_total", scope="user") == before + 1


async def test_concurrent_scrapes_all_succeed(admin: Admin) -> None:
    results = await asyncio.gather(*(admin.scrape() for _ in range(8)))
    assert all(sample(r, "picobot_outbound_queue_depth") == 0 for r in results)


async def test_webhook_metrics_middleware_counts_routed_requests() -> None:
    metrics = PicobotMetrics()

    async def ok(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def refuse(request: web.Request) -> web.StreamResponse:
        raise web.HTTPForbidden()

    async def crash(request: web.Request) -> web.StreamResponse:
        raise RuntimeError("bug")

    app = web.Application(middlewares=[webhook_metrics_middleware(metrics)])
    app.router.add_post("/webhooks/telegram", ok)
    app.router.add_post("/webhooks/slack", refuse)
    app.router.add_post("/webhooks/generic", crash)
    app.router.add_get("/healthz", ok)
    async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
        for path in ("/webhooks/telegram", "/webhooks/telegram", "/webhooks/slack"):
            async with client.post(path) as resp:
                assert resp.status in (200, 403)
        async with client.post("/webhooks/generic") as resp:
            assert resp.status == 500
        async with client.post("/webhooks/random-scan") as resp:
            assert resp.status == 404
        async with client.get("/healthz") as resp:
            assert resp.status == 200
    samples = scrape(metrics)
    requests = "picobot_webhook_requests_total"
    assert sample(samples, requests, platform="telegram", status="200") == 2
    assert sample(samples, requests, platform="slack", status="403") == 1
    assert sample(samples, requests, platform="generic", status="500") == 1
    platforms = {dict(labels).get("platform") for name, labels in samples if name == requests}
    assert platforms == {"telegram", "slack", "generic"}


async def test_serve_exports_the_webhook_counters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "generic-secret-0123456789"
    for name, value in {
        "PICOBOT_DATA__DIR": str(tmp_path),
        "PICOBOT_SERVER__PORT": "0",
        "PICOBOT_ADMIN_API_KEYS": KEY,
        "PICOBOT_CHANNELS__WEBHOOK__GENERIC__ENABLED": "true",
        # Nothing listens there: the reply is retried, which this test does not wait for.
        "PICOBOT_CHANNELS__WEBHOOK__GENERIC__CALLBACK_URL": "http://127.0.0.1:9/",
        "PICOBOT_GENERIC_WEBHOOK_SECRET": secret,
    }.items():
        monkeypatch.setenv(name, value)
    stop = asyncio.Event()
    scraped: list[Samples] = []

    async def post_and_scrape(base: str) -> None:
        body = json.dumps({"user": "bob", "chat": "c", "text": "hi", "message_id": "1"})
        headers = signed_headers(body.encode(), secret=secret)
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/webhooks/generic", data=body, headers=headers) as r:
                assert r.status == 200
            async with http.get(f"{base}/metrics", headers={"X-API-Key": KEY}) as r:
                scraped.append(parse_exposition(await r.text()))

    tasks: list[asyncio.Task[None]] = []

    def ready(info: ServeInfo) -> None:
        assert info.http_url is not None
        task = asyncio.create_task(post_and_scrape(info.http_url))
        task.add_done_callback(lambda _: stop.set())
        tasks.append(task)

    before = scrape(METRICS)
    assert await serve(Settings(), provider=ScriptedProvider(), stop=stop, ready=ready) == 0
    await tasks[0]
    (samples,) = scraped
    assert sample(samples, "picobot_webhook_messages_total", outcome="accepted") == 1
    requests = (
        "picobot_webhook_requests_total",
        frozenset({("platform", "generic"), ("status", "200")}),
    )
    assert samples[requests] == before.get(requests, 0.0) + 1

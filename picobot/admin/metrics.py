"""``GET /metrics`` of the admin API, and the webhook request counter.

:class:`MetricsEndpoint` owns the server's registry (:func:`picobot.metrics.server_registry`):
the process-wide :data:`~picobot.metrics.METRICS`, process/GC/platform metrics, the
queue depths and the background jobs read at each scrape, and whatever collectors
the server adds (``picobot serve`` adds the webhook counters). Values that live in
the database (queue depths, the last retention run) are read before each scrape, so
a run or a row written by another process shows up too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from picobot.admin.http import read_query
from picobot.admin.models import NoQuery
from picobot.errors import StoreUnavailable
from picobot.metrics import METRICS, PicobotMetrics, render, server_registry
from picobot.privacy.scopes import Actor
from picobot.store.channels.webhooks import WebhookStore
from picobot.store.db import Database
from picobot.store.retrieval.search import SearchIndex
from picobot.store.task_runs import TASK_NAME, last_run
from picobot.tasks.supervisor import TaskSupervisor

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

QUEUES = (
    ("picobot_outbound_queue_depth", "Platform replies waiting to be delivered."),
    ("picobot_inbox_queue_depth", "Webhook messages accepted and waiting for their turn."),
    ("picobot_search_queue_depth", "Stored messages waiting to enter the recall index."),
)


class QueueDepths:
    """The rows waiting in each durable queue, as read by :meth:`refresh`.

    A queue that could not be read has no sample (rather than a stale or zero one):
    an alert on ``absent()`` sees the store is down, and the rest of the scrape works.
    """

    def __init__(self, db: Database) -> None:
        self._webhooks = WebhookStore(db)
        self._search = SearchIndex(db)
        self._depths: dict[str, int] = {}

    async def refresh(self) -> None:
        """Read every queue's depth now (concurrently: they are independent reads)."""
        results = await asyncio.gather(
            self._webhooks.queue_depth(),
            self._webhooks.inbox_depth(),
            self._search.queue_depth(),
            return_exceptions=True,
        )
        depths: dict[str, int] = {}
        for (name, _), result in zip(QUEUES, results, strict=True):
            if isinstance(result, Exception):
                log.warning("metrics: could not read %s", name, exc_info=result)
            elif isinstance(result, BaseException):
                raise result  # cancelled: the scrape ends here
            else:
                depths[name] = result
        self._depths = depths

    def describe(self) -> Iterable[Metric]:
        """The families, without values."""
        return [GaugeMetricFamily(name, text) for name, text in QUEUES]

    def collect(self) -> Iterable[Metric]:
        """The depths read by the last :meth:`refresh`."""
        return [
            GaugeMetricFamily(name, text, value=self._depths[name])
            for name, text in QUEUES
            if name in self._depths
        ]


class JobMetrics:
    """Runs and failures of the runtime's periodic jobs, and failed one-off tasks."""

    def __init__(self, tasks: TaskSupervisor) -> None:
        self._tasks = tasks

    def collect(self) -> Iterable[Metric]:
        """Read from the supervisor's in-memory status."""
        runs = CounterMetricFamily(
            "picobot_job_runs", "Finished runs of a periodic background job.", labels=["job"]
        )
        failures = CounterMetricFamily(
            "picobot_job_failures", "Runs of a periodic background job that failed.", labels=["job"]
        )
        for name, status in sorted(self._tasks.status().items()):
            runs.add_metric([name], status.runs)
            failures.add_metric([name], status.failures)
        tasks = CounterMetricFamily(
            "picobot_background_task_failures",
            "One-off background tasks (turns of webhook chats, sends) that raised.",
            value=self._tasks.spawn_failures,
        )
        return [runs, failures, tasks]


class MetricsEndpoint:
    """The ``/metrics`` route of one admin server, with that server's own registry."""

    def __init__(
        self,
        db: Database,
        tasks: TaskSupervisor,
        *,
        metrics: PicobotMetrics = METRICS,
        collectors: Sequence[Collector] = (),
    ) -> None:
        self._db = db
        self._metrics = metrics
        self._queues = QueueDepths(db)
        self.registry = server_registry(metrics, self._queues, JobMetrics(tasks), *collectors)

    async def refresh(self) -> None:
        """Read what lives in the database: the last retention run, the queue depths."""
        try:
            # task_runs is the durable record: it survives restarts and includes runs
            # of `picobot retention run` from the command line.
            run = await last_run(self._db, TASK_NAME)
        except StoreUnavailable:
            log.warning("metrics: could not read the last retention run", exc_info=True)
        else:
            finished = None if run is None else run.last_finished_at
            self._metrics.retention_last_run_timestamp.set(finished or 0.0)
            self._metrics.retention_last_run_ok.set(1.0 if run is not None and run.ok else 0.0)
        await self._queues.refresh()

    async def handle(self, request: web.Request, actor: Actor) -> web.StreamResponse:
        """``GET /metrics``: Prometheus text 0.0.4, or OpenMetrics when the Accept asks."""
        read_query(request, NoQuery)
        await self.refresh()
        # Encoded with no await after the refresh, so a concurrent scrape cannot swap
        # the queue depths in between.
        body, content_type = render(self.registry, ",".join(request.headers.getall("Accept", [])))
        return web.Response(body=body, headers={"Content-Type": content_type})


def webhook_metrics_middleware(metrics: PicobotMetrics = METRICS) -> Middleware:
    """A middleware counting ``/webhooks/<platform>`` requests by platform and status.

    Only requests routed to a registered webhook route are counted, so the platform
    label takes only configured names: a scan of random paths adds no series.
    """

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        path = resource.canonical if resource is not None else ""
        if not path.startswith("/webhooks/") or "{" in path:
            return await handler(request)
        requests = metrics.webhook_requests
        platform = path.removeprefix("/webhooks/")
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            requests.labels(platform=platform, status=str(exc.status)).inc()
            raise
        except Exception:
            requests.labels(platform=platform, status="500").inc()
            raise
        requests.labels(platform=platform, status=str(response.status)).inc()
        return response

    return count

"""`make metrics-server`, and luigid's `/metrics` (its `metrics_custom_import`, ops/luigid.py): Luigi's task
metrics and `portal_export.metrics` of the data dir at scrape time, as `prometheus_client` families. A
scrape that cannot read the store still answers `portal_export_store_up 0`, so an alert names the store."""

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from luigi.contrib.prometheus_metric import PrometheusMetricsCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_wsgi_server
from prometheus_client.registry import Collector, CollectorRegistry

import tasks
from portal_export.errors import ExportError
from portal_export.metrics import PREFIX, Metrics, Settings
from portal_export.runs import ttl_s
from portal_export.store import Store
from tasks import config, targets

from . import UsageError, retention_run

log = logging.getLogger(__name__)
STORE_RETRY_S = 3.0  # a scrape's wait for an object store that does not answer: Prometheus's timeout is 10 s


def settings() -> Settings:
    """The configured numbers the metrics compare with."""
    days = config.portal().metrics_window_days
    if days < 1:
        raise config.ConfigError(f"[portal] metrics_window_days = {days}: give at least 1")
    in_use = retention_run.breakers_in_use()
    return Settings(
        configured_cap=config.configured_cap(),
        max_unsolvable_ratio=config.portal().max_unsolvable_ratio,
        window_days=days,
        ttl_s=ttl_s(config.captchaai().plan_every_s),
        timeout_s=config.captchaai().timeout_s,
        submit_s=config.captchaai().http_timeout_s,
        breakers_in_use=None if in_use is None else frozenset(in_use),
    )


KEY_UNKNOWN = (
    "CAPTCHAAI_API_KEY is not set here: portal_export_breaker_open counts every breaker, an old key's too "
    "(give the metrics server the runs' environment file)"
)


def data_store() -> Store:
    """The data dir's store, with a short outage bound for scrapes."""
    return targets.store_at(config.data_dir_text(), STORE_RETRY_S)


class PortalExportCollector(Collector):
    """The `portal_export_*` families, computed at each scrape; one scrape at a time (the day cache is shared)."""

    def __init__(self, make: Callable[[], Metrics] | None = None) -> None:
        self._make = make or configured
        self._metrics: Metrics | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            started = time.monotonic()
            try:
                if self._metrics is None:
                    self._metrics = self._make()
                found, up = self._metrics.collect(), 1
            except (ExportError, OSError, ValueError) as err:  # StoreError, config.ConfigError among them
                log.warning("metrics: the data dir could not be read: %s", err)
                found, up = [], 0
            elapsed = time.monotonic() - started
            yield gauge("store_up", "1 when the last scrape read the data dir, 0 when its store failed.", up)
            yield gauge("scrape_duration_seconds", "What reading the data dir took for this scrape.", elapsed)
        for m in found:
            family = (CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily)(
                m.name, m.help, labels=sorted({k for labels, _ in m.samples for k in labels})
            )
            for labels, value in m.samples:
                family.add_metric([labels[k] for k in sorted(labels)], value)
            yield family


class LuigidMetrics(PrometheusMetricsCollector):
    """luigid's collector: Luigi's task metrics and the `portal_export_*` of the data dir its `[portal]` names."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.registry.register(PortalExportCollector())
        # Counters exist at 0 from the start, so that `increase()` counts a family's first failure too
        if self.labels == ["family"]:
            for kind in ("started", "failed", "disabled", "done"):
                for family in tasks.__all__:
                    getattr(self, f"task_{kind}_counter").labels(family=family)

    # Luigi 3.8.1 lacks handle_task_done's None check here: a task failed before it ran would raise
    def handle_task_failed(self, task: Any) -> None:
        if task.time_running is None:
            self.task_failed_counter.labels(**self._generate_task_labels(task)).inc()  # type: ignore[no-untyped-call]
        else:
            super().handle_task_failed(task)  # type: ignore[no-untyped-call]

    def handle_task_disabled(self, task: Any, config: Any) -> None:
        if task.time_running is None:
            self.task_disabled_counter.labels(**self._generate_task_labels(task)).inc()  # type: ignore[no-untyped-call]
        else:
            super().handle_task_disabled(task, config)  # type: ignore[no-untyped-call]


def configured(warn: bool = True) -> Metrics:
    """The metrics of the configured data dir; `warn`: log when the key in use is not known."""
    found = settings()
    if warn and found.breakers_in_use is None:
        log.warning("metrics: %s", KEY_UNKNOWN)
    return Metrics(data_store(), found)


def gauge(name: str, help: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, help, value=value)


def parse_port(text: str) -> int:
    """METRICS_PORT: 0 (any free port) to 65535; else UsageError."""
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise UsageError(f"METRICS_PORT={text!r}: give a port number from 1 to 65535 (0: any free port)")
    return int(text)


def serve(port: int, bind: str, say: Callable[[str], None], stop: threading.Event | None = None) -> int:
    """Serve GET /metrics on `bind`:`port` until SIGTERM or SIGINT (or `stop`); 0 then."""
    known = settings().breakers_in_use is not None  # a bad [portal] metrics_window_days: said now, not at each scrape
    targets.check_store()  # a missing bucket or refused credentials: one line, before serving
    registry = CollectorRegistry(auto_describe=False)  # the portal_export collector alone: no process metrics
    registry.register(PortalExportCollector(lambda: configured(warn=False)))
    try:
        server, thread = start_wsgi_server(port, bind, registry)
    except OSError as err:
        say(f"error: metrics-server cannot listen on {bind} port {port}: {err.strerror or err}")
        return 2
    host, bound = str(server.server_address[0]), server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    say(f"metrics: serving http://{shown}:{bound}/metrics from {targets.where()} (stop with Ctrl-C or SIGTERM)")
    if not known:
        say(f"warning: metrics: {KEY_UNKNOWN}")
    done = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda signum, frame: done.set())
    done.wait()
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
    say("metrics: stopped")
    return 0

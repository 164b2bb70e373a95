"""luigid's `/metrics`: Luigi's own task metrics and the deployment's `portal_export_*`, in one scrape.

`make scheduler` (and sandbox/luigid.py) configure luigid with `[scheduler] metrics_collector =
custom` and `metrics_custom_import = ops.luigid_metrics.LuigidMetrics` (`ops/luigid.py`). luigid
builds the class with no arguments; it reads the data dir from the `[portal]` section written
beside it, at each scrape, as `make metrics-server` does.
"""

# mypy: disable-error-code="no-untyped-call"
# (Luigi's collector is unannotated)

from typing import Any

from luigi.contrib.prometheus_metric import PrometheusMetricsCollector

import tasks

from .metrics_server import PortalExportCollector


class LuigidMetrics(PrometheusMetricsCollector):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry.register(PortalExportCollector())
        # Each task family's counters exist at 0 from the start: `increase()` counts a family's first
        # failure too (a counter that appears at 1 has not increased, for Prometheus).
        if self.labels == ["family"]:
            for counter in (
                self.task_started_counter,
                self.task_failed_counter,
                self.task_disabled_counter,
                self.task_done_counter,
            ):
                for family in tasks.__all__:
                    counter.labels(family=family)

    # Luigi 3.8.1 sets the execution time of a failed or disabled task without the None check its
    # handle_task_done has: a task that fails before it ever ran (a dead worker's) would raise.
    def handle_task_failed(self, task: Any) -> None:
        if task.time_running is None:
            self.task_failed_counter.labels(**self._generate_task_labels(task)).inc()
        else:
            super().handle_task_failed(task)

    def handle_task_disabled(self, task: Any, config: Any) -> None:
        if task.time_running is None:
            self.task_disabled_counter.labels(**self._generate_task_labels(task)).inc()
        else:
            super().handle_task_disabled(task, config)

"""luigid's `/metrics` (its `metrics_custom_import`, ops/luigid.py): Luigi's own task metrics and the
`portal_export_*` of the data dir its config's `[portal]` names, in one scrape.
"""

# mypy: disable-error-code="no-untyped-call"

from typing import Any

from luigi.contrib.prometheus_metric import PrometheusMetricsCollector

import tasks

from .metrics_server import PortalExportCollector


class LuigidMetrics(PrometheusMetricsCollector):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry.register(PortalExportCollector())
        # Counters exist at 0 from the start, so that `increase()` counts a family's first failure too
        if self.labels == ["family"]:
            for counter in (
                self.task_started_counter,
                self.task_failed_counter,
                self.task_disabled_counter,
                self.task_done_counter,
            ):
                for family in tasks.__all__:
                    counter.labels(family=family)

    # Luigi 3.8.1 lacks handle_task_done's None check here: a task failed before it ran would raise
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

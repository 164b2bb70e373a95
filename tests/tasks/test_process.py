"""tasks/process.py: how a task process ends when its run is told to stop."""

import luigi
import luigi.worker
import pytest

from ops.luigi_run import QUIET_END


class Nothing(luigi.Task):
    def run(self):
        pass


class StoppedWhileReporting:
    """The worker's result queue, as a task process meets it when the stop lands in Luigi's own
    `finally` that hands the result over (after the task's run)."""

    def put(self, item):
        raise KeyboardInterrupt


@pytest.mark.parametrize(("context", "code", "traceback"), [(QUIET_END, 130, False), (None, 1, True)])
def test_a_task_process_stopped_after_its_run_ends_without_a_traceback(capfd, context, code, traceback):
    task = Nothing()
    process = luigi.worker.ContextManagedTaskProcess(
        context,
        task,
        "worker",
        StoppedWhileReporting(),
        luigi.worker.TaskStatusReporter(None, task.task_id, "worker", None),
        use_multiprocessing=True,
        worker_timeout=0,
        check_unfulfilled_deps=False,
        check_complete_on_run=False,
    )
    process.start()
    process.join(30)
    assert process.exitcode == code  # 130 as a run's task process within the run (stops_quietly)
    assert ("Traceback" in capfd.readouterr().err) is traceback

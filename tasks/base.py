"""What RegionExport and DayExport share: one attempt per run, death with their worker, and a
failure the visualiser shows by its code, never the key."""

from contextlib import contextmanager

import luigi

from .process import die_with_worker
from .secrets import format_failure, scrub


@contextmanager
def failure_shown(task):
    """On failure, replace the task's last progress message with the error's code.

    Inside run(): Luigi unhooks set_status_message before it calls on_failure.
    """
    try:
        yield
    except Exception as err:
        task.set_status_message(scrub(f"failed: {getattr(err, 'code', type(err).__name__)}"))
        raise


class PortalTask(luigi.Task):
    # Transient errors are retried inside the task with backoff, so a failure that reaches Luigi
    # is permanent, failed validation or has used every attempt: one attempt, then DISABLED, and a
    # keep-alive worker moves on instead of re-running it every retry_delay. The CLI re-enables
    # the disabled tasks of its days on the next run.
    retry_count = 1

    def run(self):
        die_with_worker()  # a killed run must not leave this process solving or writing
        with failure_shown(self):
            self.work()

    def work(self):
        raise NotImplementedError

    def on_failure(self, exception):
        return format_failure(exception)

"""What RegionExport and DayExport share: one attempt per run, death with their worker, and a
failure the visualiser shows by its code, never the key."""

import logging

import luigi

from portal_export.failures import clear_failure, write_failure

from . import targets
from .process import die_with_worker, stops_quietly
from .secrets import format_failure, scrub

log = logging.getLogger(__name__)


def error_code(err: BaseException) -> str:
    return getattr(err, "code", None) or type(err).__name__


class PortalTask(luigi.Task):
    # Transient errors are retried inside the task, so a failure that reaches Luigi is final: one
    # attempt, then DISABLED, and a keep-alive worker moves on instead of re-running it every
    # retry_delay. The CLI re-enables the disabled tasks of its days on the next run.
    retry_count = 1

    def status(self, message: str) -> None:
        """The visualiser's status line. Luigi's worker sets the callback before run(): None outside a run."""
        if self.set_status_message is not None:
            self.set_status_message(message)

    def progress(self, percent: int) -> None:
        if self.set_progress_percentage is not None:
            self.set_progress_percentage(percent)

    def run(self) -> None:
        die_with_worker()  # a killed run must not leave this process solving or writing
        with stops_quietly():
            try:
                self.work()
            except Exception as err:  # here: Luigi unhooks set_status_message before it calls on_failure
                self.status(scrub(f"failed: {error_code(err)}"))
                raise
        self.clear_failures()

    def work(self) -> None:
        raise NotImplementedError

    def clear_failures(self) -> None:
        clear_failure(targets.store(), self.failure_key())

    def failure_key(self) -> str:
        """Where the task's failure record lives: the run's summary reads the code there, under any scheduler."""
        raise NotImplementedError

    def on_failure(self, exception: BaseException) -> str:
        try:
            write_failure(targets.store(), self.failure_key(), error_code(exception), scrub(str(exception))[:300])
        except Exception as err:  # an OSError, a store that is down: the failure itself must still reach Luigi
            log.warning("could not record the failure of %s: %s", self, err)
        return format_failure(exception)

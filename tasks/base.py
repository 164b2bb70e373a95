"""What RegionExport and DayExport share: one attempt per run, a failure the visualiser shows by its code, never the
key, and death with their worker (PR_SET_PDEATHSIG; its Manager too): an orphan would solve over the freed cap."""

import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Iterator

import luigi

from portal_export.failures import write_failure

from . import targets
from .secrets import format_failure, scrub

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
WORKER_PID = os.getpid()  # the module is imported by the worker before it forks any task
STOPS = (signal.SIGINT, signal.SIGTERM)
_starting_helpers = False  # within helpers_die_with_worker's block


def die_with_worker() -> None:
    if os.getpid() == WORKER_PID or not sys.platform.startswith("linux"):
        return  # workers=1 runs tasks in the worker itself
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != WORKER_PID:  # the worker died before the line above took effect
        os._exit(1)


def _helper_dies_with_worker() -> None:
    if _starting_helpers:
        die_with_worker()


os.register_at_fork(after_in_child=_helper_dies_with_worker)


@contextlib.contextmanager
def helpers_die_with_worker() -> Iterator[None]:
    """Processes forked within the block (Luigi's Worker starts its helpers as it is made) die with this one."""
    global _starting_helpers
    _starting_helpers = True
    try:
        yield
    finally:
        _starting_helpers = False


def _deaf_to_stops() -> None:
    # A handler that does nothing, not SIG_IGN: a stop already pending (Ctrl-C's and the worker's come together)
    # would then raise OSError("Signal 15 ignored due to race condition") into the unwinding.
    for signum in STOPS:
        signal.signal(signum, lambda signum, frame: None)


def end_quietly() -> None:
    """A stopped task process's end: 130, nothing printed, deaf to the stop its worker passes on."""
    _deaf_to_stops()
    sys.stderr.flush()
    os._exit(128 + signal.SIGINT)


def _interrupt(signum: int, frame: object) -> None:
    """The first stop unwinds the task; the next must not cut short the `finally` releasing its marks."""
    _deaf_to_stops()
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def stops_quietly() -> Iterator[None]:
    """A forked task process told to stop ends quietly once the task has released its marks (workers=1: the worker
    stops whole). Only within the run, and a stop it handles: outside, ops/stopping.py ends the process at once."""
    forked = os.getpid() != WORKER_PID
    handled = {s: h for s in STOPS if callable(h := signal.getsignal(s))} if forked else {}
    for signum in handled:
        signal.signal(signum, _interrupt)
    try:
        yield
    except KeyboardInterrupt:
        if not forked:
            raise
        end_quietly()
    finally:
        for signum, handler in handled.items():
            signal.signal(signum, handler)


def error_code(err: BaseException) -> str:
    return getattr(err, "code", None) or type(err).__name__


class PortalTask(luigi.Task):
    # Transient errors are retried inside the task: a failure reaching Luigi is final (DISABLED, not re-run every
    # retry_delay by a keep-alive worker). The CLI re-enables the disabled tasks of its days on the next run.
    retry_count = 1

    def status(self, message: str | None = None, percent: int | None = None) -> None:
        """The visualiser's status line and progress bar. Luigi's worker sets them before run(): None outside one."""
        if message is not None and self.set_status_message is not None:
            self.set_status_message(message)
        if percent is not None and self.set_progress_percentage is not None:
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
        """After success. A region's is left to its DayExport, off its slot: a record counts only without output."""

    def failure_key(self) -> str:
        """Where the task's failure record lives: the run's summary reads the code there, under any scheduler."""
        raise NotImplementedError

    def on_failure(self, exception: BaseException) -> str:
        try:
            write_failure(targets.store(), self.failure_key(), error_code(exception), scrub(str(exception))[:300])
        except Exception as err:  # an OSError, a store that is down: the failure itself must still reach Luigi
            log.warning("could not record the failure of %s: %s", self, err)
        return format_failure(exception)

"""Task processes that die with their worker.

With workers > 1 Luigi runs each task in a forked child, and a child outlives a SIGKILLed or
SIGTERMed parent: it would go on solving, and once the scheduler frees the dead worker's slots,
more solves than the cap would be in flight. PR_SET_PDEATHSIG has the kernel kill it instead.
The worker's helper process (its completion cache, a multiprocessing.Manager server, which never
notices its parent's death) is given the same end, or every killed run would leave one behind.
"""

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator

_PR_SET_PDEATHSIG = 1
WORKER_PID = os.getpid()  # the module is imported by the worker before it forks any task


def die_with_worker() -> None:
    if os.getpid() == WORKER_PID or not sys.platform.startswith("linux"):
        return  # workers=1 runs tasks in the worker itself
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != WORKER_PID:  # the worker died before the line above took effect
        os._exit(1)


_starting_helpers = False


def _helper_dies_with_worker() -> None:
    if _starting_helpers:
        die_with_worker()


os.register_at_fork(after_in_child=_helper_dies_with_worker)


@contextlib.contextmanager
def helpers_die_with_worker() -> Iterator[None]:
    """Processes this one forks within the block (Luigi's Worker starts its helpers as it is made)
    die with it, as its task processes do."""
    global _starting_helpers
    _starting_helpers = True
    try:
        yield
    finally:
        _starting_helpers = False


class EndsQuietly:
    """Luigi's `[worker] task_process_context` for the run's worker: a task process told to stop
    after its task's run (while it hands the result to its worker, which is stopping too) ends as
    `stops_quietly` ends one within the run, not with the traceback multiprocessing prints."""

    def __init__(self, process: object) -> None:
        self.process = process

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, KeyboardInterrupt) and os.getpid() != WORKER_PID:
            sys.stderr.flush()
            os._exit(128 + signal.SIGINT)


@contextlib.contextmanager
def stops_quietly() -> Iterator[None]:
    """A task process told to stop (Ctrl-C at the terminal, or the signal its worker passes on:
    ops/stopping.py) ends once the task has unwound, its solves abandoned and their marks
    released: no traceback, and no failure reported for a task nobody let finish. Where the
    worker runs the task itself (workers=1) the worker stops as a whole instead."""
    try:
        yield
    except KeyboardInterrupt:
        if os.getpid() == WORKER_PID:
            raise
        sys.stderr.flush()
        os._exit(128 + signal.SIGINT)

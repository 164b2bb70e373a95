"""Task processes that die with their worker, and end quietly when stopped. With workers > 1 each task
runs in a forked child that would outlive a killed worker and keep solving, over the cap once the
scheduler frees the dead worker's slots: PR_SET_PDEATHSIG has the kernel kill it. The worker's
completion-cache server (a multiprocessing.Manager) gets the same end."""

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
    """Processes forked within the block (Luigi's Worker starts its helpers as it is made) die with this one."""
    global _starting_helpers
    _starting_helpers = True
    try:
        yield
    finally:
        _starting_helpers = False


STOPS = (signal.SIGINT, signal.SIGTERM)


def _deaf_to_stops() -> None:
    for signum in STOPS:
        signal.signal(signum, signal.SIG_IGN)


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
    """A forked task process told to stop (Ctrl-C, or its worker passing a stop on) ends once the task
    has unwound and released its marks: no traceback, no failure reported; with workers=1 the worker
    stops as a whole. Only a stop a run handles raises here, and only within the task's run: outside it
    ops/stopping.py ends the process at once (no printed interruption, no unwinding into the worker)."""
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

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


STOPS = (signal.SIGINT, signal.SIGTERM)


def _deaf_to_stops() -> None:
    for signum in STOPS:
        signal.signal(signum, signal.SIG_IGN)


def end_quietly() -> None:
    """A stopped task process's end: 130, nothing printed, and a second stop (the worker passes its
    own on) no longer heard while it ends."""
    _deaf_to_stops()
    sys.stderr.flush()
    os._exit(128 + signal.SIGINT)


def _interrupt(signum: int, frame: object) -> None:
    """The first stop unwinds the task; one more (the worker passes its own on) must not cut short
    the `finally` blocks releasing its in-flight marks."""
    _deaf_to_stops()
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def stops_quietly() -> Iterator[None]:
    """A task process told to stop (Ctrl-C at the terminal, or the signal its worker passes on:
    ops/stopping.py) ends once the task has unwound, its solves abandoned and their marks
    released: no traceback, and no failure reported for a task nobody let finish. Where the
    worker runs the task itself (workers=1) the worker stops as a whole instead.

    A stop interrupts a task process only within its task's run: a signal that a run handles
    (ops/stopping.py ends a task process at once outside it, where Luigi and multiprocessing would
    print the interruption, or a forked child could unwind into its worker's code) raises here."""
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

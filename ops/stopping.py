"""A run that ends promptly on SIGTERM or Ctrl-C, also while luigid does not answer.

Both signals end a run as Ctrl-C always did: a `Stopped` (a KeyboardInterrupt, so Luigi's worker
ends its task processes on the way out) unwinds the run, and the `finally` blocks on its way
release what the run holds in the data dir: its solves' in-flight marks, its heartbeat, the cap it
set. What made that slow or unreliable, each handled here:

- Luigi's RPCs retry 3 times, 30 s apart (`[core] rpc_retry_attempts`, `rpc_retry_wait`), and the
  worker joins its keep-alive thread, whose ping may be in those retries, before it ends: after
  the signal a `RemoteScheduler` here makes no further attempt and waits for nothing.
- With workers > 1 the solves run in task processes, which Luigi's worker ends with SIGTERM on
  its way out (a terminal's Ctrl-C reaches them itself). A forked process ends at once, quietly;
  within its task's run, the stop unwinds the solve first, its in-flight mark released
  (tasks/process.py). Raised anywhere else, Luigi or multiprocessing would print it, or a child
  caught between its task and its exit would unwind into its worker's code.
- Python drops an exception raised in a fork hook or a `__del__` ("Exception ignored in"), and
  Luigi's local scheduler catches every exception where it records task history, logging it with
  its traceback: until the run has been seen to stop, the signal is sent again every tenth of a second
  (ignored once the run unwinds), a stop that lands while this process forks (in the fork hooks of
  `logging` and others) waits for the next one, and a `Stopped` Luigi swallowed is not logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, cast

import luigi.rpc
from tenacity import Retrying, stop_any, stop_when_event_set
from tenacity.stop import stop_base

from tasks.process import end_quietly

SIGNALS = (signal.SIGINT, signal.SIGTERM)
AGAIN_EVERY_S = 0.1  # a stop dropped (a fork hook, an `except BaseException` of Luigi's) comes again this soon
LAST_RPC_TIMEOUT_S = 2.0  # an RPC made after the signal (telling luigid what ends) waits this long at most
PING_TIMEOUT_S = 3.0  # luigid answers a ping in milliseconds; a worker that ends waits for one in flight

_pinging = threading.local()  # the keep-alive thread's ping is under way
_silent = threading.Event()  # luigid left an RPC made after the stop unanswered

_requested = threading.Event()
_seen = threading.Event()  # the run caught its Stopped: no more signals are sent again
_signum: int = signal.SIGINT
_forking = threading.Event()  # between the fork hooks: an exception raised there is dropped


class Stopped(KeyboardInterrupt):
    """The run was told to stop by `signum` (SIGINT: Ctrl-C; SIGTERM: kill, systemd, a timeout)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def handled(wanted: bool = True) -> Iterator[None]:
    """Within: SIGINT and SIGTERM stop this process as described above (from the main thread).
    The handlers before are back after, unless a stop came (the process ends then)."""
    if not wanted:
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, _handle)
    scheduler_log = logging.getLogger("luigi.scheduler")
    scheduler_log.addFilter(_not_a_stop)
    try:
        yield
    finally:
        scheduler_log.removeFilter(_not_a_stop)
        if not _requested.is_set():
            for signum, handler in before.items():
                signal.signal(signum, handler)


def _in_forked_child() -> None:
    _forking.clear()
    for signum in SIGNALS:
        if signal.getsignal(signum) is _handle:
            signal.signal(signum, _end_quietly)


def _end_quietly(signum: int, frame: FrameType | None) -> None:
    """A forked process's stop outside its task's run: it ends as one within it (tasks/process.py)."""
    end_quietly()


# Registered after logging's (imported first): its "before" runs before theirs, its "after" after.
os.register_at_fork(before=_forking.set, after_in_parent=_forking.clear, after_in_child=_in_forked_child)


def _not_a_stop(record: logging.LogRecord) -> bool:
    """False for a record of a Stopped: by now its traceback is text (tasks/secrets.py scrubs it),
    whose last line names the exception."""
    last = (record.exc_text or "").rsplit("\n", 1)[-1]
    return not last.startswith(f"{Stopped.__module__}.{Stopped.__qualname__}:")


def requested() -> bool:
    return _requested.is_set()


def seen(stop: KeyboardInterrupt) -> int:
    """The run caught `stop`: the signal that stopped it (SIGINT for a KeyboardInterrupt of its own)."""
    _seen.set()
    return stop.signum if isinstance(stop, Stopped) else int(signal.SIGINT)


def _handle(signum: int, frame: FrameType | None) -> None:
    global _signum
    if not _requested.is_set():
        _signum = signum
        _requested.set()
        threading.Thread(target=_again, name="stop-again", daemon=True).start()
    if not _seen.is_set() and not _unwinding() and not _forking.is_set():
        raise Stopped(_signum)
    # else already unwinding: the task processes' own signal, one sent again, a second Ctrl-C


def _unwinding() -> bool:
    """Whether a KeyboardInterrupt is being handled here (an exception raised while it unwinds
    has it as its context)."""
    exc = sys.exc_info()[1]
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__context__
    return False


def _again() -> None:
    main = threading.main_thread().ident
    while main is not None and not _seen.wait(AGAIN_EVERY_S):
        signal.pthread_kill(main, _signum)


class RemoteScheduler(luigi.rpc.RemoteScheduler):
    """Luigi's RPC client, bounded once a stop is requested: no attempt after it, no wait left, a
    short timeout on what is asked after it, and nothing more asked once luigid left one
    unanswered. The keep-alive thread's ping has a short timeout always: the worker waits for a ping
    in flight before it ends, and a ping late by seconds is no news to luigid (it takes a worker
    for dead after a minute). (Luigi offers no public hook for its retries or timeouts:
    `_get_retryer` and `_connect_timeout` are the 3.8.1 internals its `_fetch` uses.)"""

    def __init__(self, url: str, connect_timeout: float | None = None) -> None:
        super().__init__(url, connect_timeout)  # type: ignore[no-untyped-call]

    def _get_retryer(self) -> Retrying:
        retryer: Retrying = super()._get_retryer()  # type: ignore[no-untyped-call]
        stop = stop_any(cast(stop_base, retryer.stop), stop_when_event_set(_requested))
        if not _requested.is_set():
            return retryer.copy(sleep=_nap, stop=stop)
        # no "Retrying" lines either: Luigi's would log the stop's traceback with them
        return retryer.copy(sleep=_nap, stop=stop, before=_unless_silent, after=lambda state: _silent.set())

    @property
    def _connect_timeout(self) -> float:
        if _requested.is_set():
            return min(self._timeout, LAST_RPC_TIMEOUT_S)
        return min(self._timeout, PING_TIMEOUT_S) if getattr(_pinging, "on", False) else self._timeout

    @_connect_timeout.setter
    def _connect_timeout(self, seconds: float) -> None:
        self._timeout = seconds

    def ping(self, **kwargs: Any) -> Any:
        _pinging.on = True
        try:
            return super().ping(**kwargs)  # type: ignore[misc]
        finally:
            _pinging.on = False


def _unless_silent(state: object) -> None:
    if _silent.is_set():
        raise luigi.rpc.RPCError("luigid left an RPC unanswered since the run was told to stop", None)


def _nap(seconds: float) -> None:
    """The wait between attempts, cut short by a stop: then the RPC fails at once."""
    if _requested.wait(seconds):
        raise luigi.rpc.RPCError("the run is stopping: no more attempts", None)

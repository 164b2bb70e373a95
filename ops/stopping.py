"""A run that ends promptly on SIGTERM or Ctrl-C, also while luigid does not answer.

Both raise `Stopped` (a KeyboardInterrupt: Luigi's worker ends its task processes), whose `finally` blocks release the
run's in-flight marks, heartbeat and cap. After the signal `RemoteScheduler` makes no further RPC attempt (Luigi's retry
3 times, 30 s apart); a forked task process ends at once and quietly, unwinding its solve first within its task's run
(tasks/base.py), never into its worker's code. Python drops exceptions raised in fork hooks and `__del__`, and
Luigi's local scheduler swallows them where it records history: the signal comes again every tenth of a second until the
run is seen to stop, a stop that lands mid-fork waits for the next, and a swallowed `Stopped` is not logged."""

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

from tasks.base import end_quietly

SIGNALS = (signal.SIGINT, signal.SIGTERM)
AGAIN_EVERY_S = 0.1  # a stop dropped (a fork hook, an `except BaseException` of Luigi's) comes again this soon
LAST_RPC_TIMEOUT_S = 2.0  # an RPC made after the signal (telling luigid what ends) waits this long at most
PING_TIMEOUT_S = 3.0  # luigid answers a ping in milliseconds; a worker that ends waits for one in flight
TASKS_END_WITHIN_S = 2.0  # a stopped task process unwinds its solve in milliseconds; one that hangs is killed

_pinging = threading.local()  # the keep-alive thread's ping is under way
_silent = threading.Event()  # luigid left an RPC made after the stop unanswered
_requested = threading.Event()
requested = _requested.is_set
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
    """Within: SIGINT and SIGTERM stop this process; the handlers before are back after, unless one came."""
    if not wanted:
        yield
        return
    before = {signum: signal.signal(signum, _handle) for signum in SIGNALS}
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
            # a forked process's stop outside its task's run: it ends as one within it (tasks/base.py)
            signal.signal(signum, lambda signum, frame: end_quietly())


# Registered after logging's (imported first): its "before" runs before theirs, its "after" after.
os.register_at_fork(before=_forking.set, after_in_parent=_forking.clear, after_in_child=_in_forked_child)


def _not_a_stop(record: logging.LogRecord) -> bool:
    """False for a record of a Stopped: its traceback's last line (text by now) names it."""
    last = (record.exc_text or "").rsplit("\n", 1)[-1]
    return not last.startswith(f"{Stopped.__module__}.{Stopped.__qualname__}:")


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
    """Whether a KeyboardInterrupt is being handled here (or is the context of the one that is)."""
    exc = sys.exc_info()[1]
    while exc is not None and not isinstance(exc, KeyboardInterrupt):
        exc = exc.__context__
    return exc is not None


def _again() -> None:
    main = threading.main_thread().ident
    while main is not None and not _seen.wait(AGAIN_EVERY_S):
        signal.pthread_kill(main, _signum)


class RemoteScheduler(luigi.rpc.RemoteScheduler):
    """Luigi's RPC client, bounded once a stop is requested: no attempt or wait after it, a short
    timeout, nothing asked once luigid left one unanswered. A ping always has a short timeout: the
    ending worker waits for it. (`_get_retryer`, `_connect_timeout`: Luigi 3.8.1 internals, no hook.)"""

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

"""Waiting costs nothing: the gate before each submit, the cap it admits against, and who waits.

A region that waits (a backoff between attempts, or the wait after a submit refused for busy
threads) says so with a `Waiting` mark, and the run that sets the cap lends its slot to another
region: Luigi's `captchaai` total is kept at the cap in force plus the regions that wait, over all
hosts. Luigi then grants more slots than the cap, so solves in flight are held at the cap here
instead, by the gate every submit goes through: a solve is admitted only while this deployment's
solves in flight are within the cap in force (`_state/cap.json`, written by the run that follows
the plan; the configured cap without one).

A submit refused for busy threads spends no attempt: it waits, marked as waiting, for a reading of
the plan made after the refusal (or one plan period when nobody follows the plan), then goes
through the gate again. Waits in a row are bounded by the PLAN_BUSY deadline: 20 plan periods.

Counts are marks in the data dir's store (`inflight.py`), so the gate holds the cap across hosts
with no lock: any store whose LIST shows a write that completed before it (local disks, S3,
SeaweedFS) will do.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterator

from . import store_keys
from .caplog import CapLog
from .errors import PermanentError, TransientError
from .governor import ZERO_CAP_PERIODS
from .inflight import InFlight, Marks
from .runs import Runs, ttl_s
from .state import read_dict, stamped
from .store import Store, write_json

log = logging.getLogger(__name__)

BUSY_EVERY_S = 0.5  # how often a wait looks for the busy verdict


class Waiting(Marks):
    """The regions that wait now (backoff or busy plan), one mark each in `_state/waiting/`."""

    kind = "waiting"

    def sleep(self, seconds: float) -> None:
        """A backoff: slept as a region that waits, so its slot goes to another region meanwhile."""
        with self.marked():
            time.sleep(seconds)


class CapInForce:
    """`_state/cap.json`: the cap in force and its reading (`read_at`, an id that changes with every
    reading of the plan), by the run that sets it.

    Honoured only while that run is alive (`Runs.alive`: its pid where it runs in this PID
    namespace, else its heartbeat, aged on the store's clock): a dead owner's cap holds nobody back.
    One GET before each submit tells the cap; the verdict on its owner comes from the runs' listing
    that the marks' count reads anyway."""

    KEY = store_keys.CAP

    def __init__(self, store: Store, runs: Runs | None = None) -> None:
        self.store = store
        self.runs = runs if runs is not None else Runs(store)

    def write(self, cap: int, read_at: float, run: str) -> None:
        write_json(self.store, self.KEY, stamped({"cap": cap, "read_at": read_at, "run": run}))

    def clear(self, run: str) -> None:
        """Delete the file if `run` wrote it (a run that took over since keeps its own)."""
        state = self._state()
        if state is not None and state[2] == run:
            self.store.delete(self.KEY)

    def _state(self) -> tuple[int, float, str] | None:
        state = read_dict(self.store, self.KEY)
        if state is None:
            return None
        try:
            return int(state["cap"]), float(state["read_at"]), str(state["run"])
        except (ValueError, KeyError, TypeError):
            return None

    def read(self) -> tuple[int, float] | None:
        """(cap, its reading's id), or None when no live run follows the plan."""
        state = self._state()
        if state is None:
            return None
        cap, read_at, run = state
        return (cap, read_at) if self.runs.alive(run) else None  # a killed run's cap holds nobody back


class Gate:
    """Admits solves under the cap in force; the client's `inflight` for a run's tasks."""

    def __init__(
        self,
        store: Store,
        *,
        configured: int,
        plan_every_s: float,
        follows_plan: bool = True,
        caplog: CapLog | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`store`: the data dir's, where the marks, the cap in force and the busy verdict are."""
        runs = Runs(store, ttl_s(plan_every_s), cache_s=1.0)
        self.inflight = InFlight(store, runs)
        self.waiting = Waiting(store, runs)
        self.cap_file = CapInForce(store, runs)
        self.caplog = caplog if caplog is not None else CapLog(store)
        self.step_s = self.inflight.step_s
        self._busy_checked = -float("inf")
        self.configured = configured
        self.plan_every_s = plan_every_s
        self.follows_plan = follows_plan
        self.clock = clock
        self.sleep = sleep

    @property
    def deadline_s(self) -> float:
        return ZERO_CAP_PERIODS * self.plan_every_s

    def cap(self) -> int:
        seen = self.cap_file.read()
        return self.configured if seen is None else seen[0]

    def check(self) -> None:
        """Raise PLAN_BUSY once the governor has given up waiting for a usable thread.

        Looked up at most every BUSY_EVERY_S: the verdict may sit in an object store, and waits
        look again every step; the deadline it ends is 20 plan periods long.
        """
        now = self.clock()
        if now - self._busy_checked < BUSY_EVERY_S:
            return
        self._busy_checked = now
        busy = self.caplog.busy()
        if busy is not None:
            reason = busy.get("reason", "no plan thread usable")
            raise PermanentError("PLAN_BUSY", f"{reason} (CaptchaAI plan of this key; rerun once it frees)")

    def _admitted(self, held: contextlib.ExitStack) -> bool:
        """Counted as in flight if there is room under the cap: mark first, then count.

        Why no lock is needed: of any cap + 1 solves that mark at once, the last to create its mark
        lists after every other mark was created, so it counts cap + 1 and withdraws. A store that
        shows in a LIST every write completed before it (S3, SeaweedFS, a disk) is all it takes.
        """
        cap = self.cap()
        if cap <= 0:
            return False
        key = self.inflight.mark()
        if self.inflight.count() <= cap:
            held.callback(self.inflight.unmark, key)
            return True
        self.inflight.unmark(key)
        return False

    @contextlib.contextmanager
    def solving(self) -> Iterator[None]:
        """One solve in flight, admitted under the cap in force (waiting its turn if need be)."""
        with contextlib.ExitStack() as held:
            while True:
                self.check()
                if self._admitted(held):
                    break
                # jittered: waiters that withdrew together do not all mark again together
                self.sleep(self.step_s * random.uniform(0.5, 1.5))
            yield

    @staticmethod
    def _thread_free(plan: Callable[[], tuple[int, int]]) -> bool:
        try:
            threads, working = plan()
        except TransientError:
            return False
        return working < threads

    def after_refusal(
        self,
        busy_since: float,
        detail: str,
        plan: Callable[[], tuple[int, int]] | None = None,
        every_s: float = 5.0,
    ) -> None:
        """A submit was refused for busy threads (just now): wait for the plan to be read again.

        Returns when a reading made after the refusal is in (the cap then says whether there is room;
        the gate waits on it). When nobody follows the plan, the region reads it itself (`plan`, every
        `every_s`: the poll interval) and returns once a thread is free, or after one plan period. Raises PLAN_BUSY
        once submits have been refused for the deadline in a row. While the cap follows the plan the
        region lends its slot meanwhile; under a fixed cap it keeps it: another region's submit would
        only be refused as well.
        """
        deadline = busy_since + self.deadline_s
        # A reading made after the refusal is one published after it: the owner's `read_at` changes
        # (it is compared for a change, never with this host's clock; the owner's may be off).
        before = self.cap_file.read()
        with self.waiting.marked() if self.follows_plan else contextlib.nullcontext():
            until = min(self.clock() + self.plan_every_s, deadline)
            look = self.clock() + every_s
            while self.clock() < until:
                self.check()
                seen = self.cap_file.read()
                if seen is not None and (before is None or seen[1] != before[1]):
                    break
                if plan is not None and not self.follows_plan and self.clock() >= look:
                    look = self.clock() + every_s
                    if self._thread_free(plan):
                        break
                self.sleep(self.step_s)
        if self.clock() >= deadline:
            raise PermanentError(
                "PLAN_BUSY",
                f"no plan thread usable for {self.clock() - busy_since:.0f} s: {detail} "
                "(CaptchaAI plan of this key; rerun once it frees)",
            )

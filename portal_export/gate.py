"""Waiting costs nothing: the gate before each submit, the cap it admits against, and who waits.

A region that waits (a backoff between attempts, or the wait after a submit refused for busy
threads) says so with a `Waiting` mark, and the scheduler's side lends its slot to another region:
Luigi's `captchaai` total is kept at the cap in force plus the regions that wait. Luigi then grants
more slots than the cap, so solves in flight are held at the cap here instead, by the gate every
submit goes through: a solve is admitted only while this deployment's solves in flight are below
the cap in force (`cap.json`, written by whoever follows the plan; the configured cap without one).

A submit refused for busy threads spends no attempt: it waits, marked as waiting, for a reading of
the plan made after the refusal (or one plan period when nobody follows the plan), then goes
through the gate again. Waits in a row are bounded by the PLAN_BUSY deadline: 20 plan periods.

Counts are files in the state dir named `<pid>-<n>` (see `inflight.py`); admission is a check and
a create under one flock, so two processes never both take the last place.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .caplog import CapLog
from .errors import PermanentError, TransientError
from .governor import ZERO_CAP_PERIODS
from .inflight import InFlight, alive
from .store import LocalStore, write_json

log = logging.getLogger(__name__)

STEP_S = 0.02  # how often a wait looks again (a listdir): well under a poll, and a slot lent at once
BUSY_EVERY_S = 0.5  # how often a wait looks for the busy verdict


class Waiting(InFlight):
    """The regions that wait now (backoff or busy plan), one file each in `<state dir>/waiting/`."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        super().__init__(state_dir)
        self.dir = Path(state_dir) / "waiting"

    def sleep(self, seconds: float) -> None:
        """A backoff: slept as a region that waits, so its slot goes to another region meanwhile."""
        with self.solving():
            time.sleep(seconds)


class CapInForce:
    """`<runtime dir>/cap.json`: the cap in force and when the plan was last read, by the run that sets it."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.store = LocalStore(state_dir)
        self.path = Path(state_dir) / "cap.json"

    def write(self, cap: int, read_at: float) -> None:
        write_json(self.store, self.path.name, {"cap": cap, "read_at": read_at, "pid": os.getpid()})

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def read(self) -> tuple[int, float] | None:
        """(cap, time of the last reading), or None when no live run follows the plan."""
        try:
            state = json.loads(self.path.read_text())
            cap, read_at, pid = int(state["cap"]), float(state["read_at"]), int(state["pid"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None
        return (cap, read_at) if alive(pid) else None  # a killed run's cap holds nobody back


class Gate:
    """Admits solves under the cap in force; the client's `inflight` for a run's tasks."""

    def __init__(
        self,
        runtime_dir: str | os.PathLike[str],
        *,
        configured: int,
        plan_every_s: float,
        follows_plan: bool = True,
        caplog: CapLog | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`runtime_dir`: this host's folder for the counts; `caplog`: where the busy verdict is
        (the data dir's store; by default beside the counts)."""
        self.inflight = InFlight(runtime_dir)
        self.waiting = Waiting(runtime_dir)
        self.cap_file = CapInForce(runtime_dir)
        self.caplog = caplog if caplog is not None else CapLog(LocalStore(runtime_dir))
        self.lock_path = Path(runtime_dir) / "inflight.lock"
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
        look again every STEP_S; the deadline it ends is 20 plan periods long.
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
        """Counted as in flight if there is room under the cap, checked and counted under one lock."""
        self.inflight.dir.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released on close
            if self.inflight.count() >= self.cap():
                return False
            held.enter_context(self.inflight.solving())
            return True

    @contextlib.contextmanager
    def solving(self) -> Iterator[None]:
        """One solve in flight, admitted under the cap in force (waiting its turn if need be)."""
        with contextlib.ExitStack() as held:
            while True:
                self.check()
                if self._admitted(held):
                    break
                self.sleep(STEP_S)
            yield

    def poke(self) -> None:
        self.inflight.poke()

    @staticmethod
    def _thread_free(plan: Callable[[], tuple[int, int]]) -> bool:
        try:
            threads, working = plan()
        except TransientError:
            return False
        return working < threads

    def after_refusal(
        self,
        refused_at: float,
        busy_since: float,
        detail: str,
        plan: Callable[[], tuple[int, int]] | None = None,
        every_s: float = 5.0,
    ) -> None:
        """A submit was refused for busy threads: wait for the plan to be read again.

        Returns when a reading made after the refusal is in (the cap then says whether there is room;
        the gate waits on it). When nobody follows the plan, the region reads it itself (`plan`, every
        `every_s`: the poll interval) and returns once a thread is free, or after one plan period. Raises PLAN_BUSY
        once submits have been refused for the deadline in a row. While the cap follows the plan the
        region lends its slot meanwhile; under a fixed cap it keeps it: another region's submit would
        only be refused as well (measured: 65 refused submits in the bench's 40 s instead of 14).
        """
        deadline = busy_since + self.deadline_s
        with self.waiting.solving() if self.follows_plan else contextlib.nullcontext():
            until = min(self.clock() + self.plan_every_s, deadline)
            look = self.clock() + every_s
            while self.clock() < until:
                self.check()
                seen = self.cap_file.read()
                if seen is not None and seen[1] > refused_at:
                    break
                if plan is not None and not self.follows_plan and self.clock() >= look:
                    look = self.clock() + every_s
                    if self._thread_free(plan):
                        break
                self.sleep(STEP_S)
        if self.clock() >= deadline:
            raise PermanentError(
                "PLAN_BUSY",
                f"no plan thread usable for {self.clock() - busy_since:.0f} s: {detail} "
                "(CaptchaAI plan of this key; rerun once it frees)",
            )

"""The gate before each submit, the cap it admits against, and the regions that wait. A region that waits (a
backoff, or after a submit refused for busy threads) holds a `Waiting` mark; Luigi's `captchaai` total is the cap in
force plus the regions that wait, so a waiting region lends its slot, and the gate holds the solves in flight over
all hosts at the cap in force (`_state/cap.json`; the configured cap without one), with no lock. A submit refused
for busy threads spends no attempt and waits for a plan reading made after it: PLAN_BUSY after 20 periods in a row."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass

from . import store_keys
from .caplog import CapLog
from .errors import PermanentError, TransientError
from .governor import ZERO_CAP_PERIODS
from .inflight import Flight, InFlight, Marks
from .runs import Runs, ttl_s
from .state import read_dict, stamped
from .store import Store, write_json

BUSY_EVERY_S = 0.5  # how often a wait looks for the busy verdict


def plan_busy(reason: str) -> PermanentError:
    return PermanentError("PLAN_BUSY", f"{reason} (CaptchaAI plan of this key; rerun once it frees)")


class Waiting(Marks):
    kind = "waiting"

    def sleep(self, seconds: float) -> None:
        """A backoff, slept as a region that waits: its slot goes to another meanwhile."""
        with self.marked():
            time.sleep(seconds)


class CapInForce:
    """`_state/cap.json`: the cap in force, its reading's id (`read_at`) and the run that set it, while it lives."""

    def __init__(self, store: Store, runs: Runs | None = None) -> None:
        self.store = store
        self.runs = runs if runs is not None else Runs(store)

    def write(self, cap: int, read_at: float, run: str) -> None:
        write_json(self.store, store_keys.CAP, stamped({"cap": cap, "read_at": read_at, "run": run}))

    def clear(self, run: str) -> None:
        if (state := self._state()) is not None and state[2] == run:
            self.store.delete(store_keys.CAP)

    def _state(self) -> tuple[int, float, str] | None:
        state = read_dict(self.store, store_keys.CAP) or {}
        try:
            return int(state["cap"]), float(state["read_at"]), str(state["run"])
        except (ValueError, KeyError, TypeError):
            return None  # none, or not one of ours

    def read(self) -> tuple[int, float] | None:
        """(cap, its reading's id), or None when no live run follows the plan."""
        state = self._state()
        return state[:2] if state is not None and self.runs.alive(state[2]) else None


@dataclass(eq=False)
class Gate:
    store: Store
    _: KW_ONLY
    configured: int
    plan_every_s: float
    follows_plan: bool = True
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        runs = Runs(self.store, ttl_s(self.plan_every_s), cache_s=1.0)
        self.inflight = InFlight(self.store, runs)
        self.waiting = Waiting(self.store, runs)
        self.cap_file = CapInForce(self.store, runs)
        self.caplog = CapLog(self.store)
        self.step_s = self.inflight.step_s
        self._busy_checked = -float("inf")

    def cap(self) -> int:
        seen = self.cap_file.read()
        return self.configured if seen is None else seen[0]

    def check(self) -> None:
        """Raise PLAN_BUSY once the governor has given up (looked up every BUSY_EVERY_S at most)."""
        now = self.clock()
        if now - self._busy_checked < BUSY_EVERY_S:
            return
        self._busy_checked = now
        if (busy := self.caplog.busy()) is not None:
            raise plan_busy(busy.get("reason", "no plan thread usable"))

    def _admitted(self, key: str) -> bool:
        """Mark `key`, then count: of cap + 1 solves marking at once, the last to mark lists all others and withdraws.
        No lock: a LIST shows every write completed before it."""
        if (cap := self.cap()) <= 0:
            return False
        self.inflight.mark(key)
        if self.inflight.count() <= cap:
            return True
        self.inflight.unmark(key)
        return False

    @contextlib.contextmanager
    def solving(self) -> Iterator[Flight]:
        # within `flying` from before the mark is first written: a stop while it counts the others (a listing,
        # seconds on a loaded store) takes the mark away, rather than leave one without a task to hold a slot
        with self.inflight.flying(self.inflight.new_key()) as flight:
            while True:
                self.check()
                if self._admitted(flight.key):
                    break
                # jittered: waiters that withdrew together mark again apart
                self.sleep(self.step_s * random.uniform(0.5, 1.5))
            yield flight

    def after_refusal(
        self, busy_since: float, detail: str, plan: Callable[[], tuple[int, int]] | None = None, every_s: float = 5.0
    ) -> None:
        """After a submit refused for busy threads: wait for a newer plan reading (its `read_at` changes, never compared
        with this host's clock) or, nobody following the plan, read `plan` every `every_s` until a thread is free; one
        period at most, PLAN_BUSY at the deadline. A fixed cap keeps the slot: another submit would be refused too."""
        deadline = busy_since + ZERO_CAP_PERIODS * self.plan_every_s
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
                    with contextlib.suppress(TransientError):  # unanswered: no thread known free
                        threads, working = plan()
                        if working < threads:
                            break
                self.sleep(self.step_s)
        if self.clock() >= deadline:
            raise plan_busy(f"no plan thread usable for {self.clock() - busy_since:.0f} s: {detail}")

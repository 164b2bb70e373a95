"""The cap follows the plan: cap = min(configured, plan threads - spare - threads others hold). `decide` is the policy,
a pure function; `Governor` reads the plan every period (at once after a busy refusal) and hands each new cap to
`set_cap(n, reason)`. Asymmetric: own solves are counted just before and after `threadsinfo` answers (`own`: in either
count, `steady`: in both); others hold at least working - own (a lowering, at once) and, for a rise, working - steady,
so solves starting and ending around a reading do not move it. A rise needs two readings in a row that allow it, half
a period apart (`steady` may hold a task CaptchaAI finished but we have not polled), and goes to the lower of the two.
`threadsinfo` caps working threads at the plan size: a full reading never raises the cap."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

from . import forksafe
from .errors import ExportError

log = logging.getLogger(__name__)

ZERO_CAP_PERIODS = 20  # then waiting regions fail with PLAN_BUSY: a busy plan shows as a failed run, not a hung one


@dataclass(frozen=True)
class Reading:
    """One look at the plan; `own`: our solves seen around it, `steady`: throughout it (None: `own`)."""

    threads: int
    working: int
    own: int
    steady: int | None = None

    @property
    def others(self) -> int:
        return max(0, self.working - self.own)

    @property
    def others_at_most(self) -> int:
        return max(0, self.working - (self.own if self.steady is None else self.steady))


@dataclass(frozen=True)
class Decision:
    cap: int
    reason: str
    target: int  # what this reading alone allows; the next reading's `proposed`


def target_cap(configured: int, spare: int, reading: Reading, others: int | None = None) -> int:
    held = reading.others if others is None else others
    return max(0, min(configured, reading.threads - spare - held))


def why(configured: int, spare: int, reading: Reading) -> str:
    threads, others = reading.threads, reading.others
    if others and reading.working >= threads:
        if reading.own == 0:
            return f"another consumer holds all {threads} plan threads"
        return f"all {threads} plan threads busy, another consumer holds at least {others}"
    if others:
        return f"another consumer holds {others} of {threads} plan threads"
    if threads - spare < configured:
        return f"the plan has {threads} threads, {spare} kept spare"
    return f"the plan leaves {threads - spare}: {threads} threads, {spare} spare, none held by others"


def decide(configured: int, spare: int, reading: Reading, current: int, proposed: int | None) -> Decision:
    """The cap after `reading`; `proposed` is the previous reading's `target` (None for none)."""
    reason = why(configured, spare, reading)
    generous = target_cap(configured, spare, reading)  # others hold at least reading.others
    if generous < current:
        return Decision(generous, reason, generous)
    target = target_cap(configured, spare, reading, reading.others_at_most)
    saturated = reading.working >= reading.threads
    if target > current and not saturated and proposed is not None and proposed > current:
        return Decision(min(target, proposed), reason, target)
    return Decision(current, reason, target)


def plan_verdict(threads: int, cap: int, workers: int) -> list[str]:
    """Problems with a cap of `cap` solves and `workers` worker processes on a plan of `threads`."""
    problems: list[str] = []
    if cap > threads - 1:
        problems.append(
            f"[resources] captchaai = {cap} leaves no spare thread on a {threads}-thread plan: "
            f"set it to {max(1, threads - 1)}"
        )
    if workers < cap:
        problems.append(f"{workers} workers cannot fill a cap of {cap} solves: set [core] workers >= {cap}")
    return problems


class Plan(Protocol):
    def threads(self) -> tuple[int, int]: ...


class Signals(Protocol):
    def prune_dead(self) -> set[str]: ...
    def last_poke(self) -> float: ...


@dataclass(eq=False)
class Governor:
    """`set_cap(n, reason)` at the first reading and each change; `blocked(reason)` once the cap has been 0 for
    `ZERO_CAP_PERIODS`, `blocked(None)` when it rises again; `on_read(n)` after every reading that answered."""

    plan: Plan
    signals: Signals
    _: KW_ONLY
    configured: int
    spare: int
    every_s: float
    set_cap: Callable[[int, str], None]
    blocked: Callable[[str | None], None] = lambda reason: None
    on_read: Callable[[int], None] = lambda cap: None
    clock: Callable[[], float] = time.monotonic
    cap: int | None = field(default=None, init=False)
    _proposed: int | None = field(default=None, init=False)
    _zero_since: float | None = field(default=None, init=False)
    _blocked: bool = field(default=False, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def read(self, seen: tuple[int, int] | None = None) -> Decision | None:
        """One reading and its decision, applied; None when CaptchaAI did not answer. `seen`: (threads, working)."""
        before = self.signals.prune_dead()
        try:
            threads, working = seen if seen is not None else self.plan.threads()
        except ExportError as err:
            log.warning("cap: threadsinfo answered %s; the cap stays %s", err, self.cap)
            return None
        after = self.signals.prune_dead()
        reading = Reading(threads, working, len(before | after), len(before & after))
        current = self.configured if self.cap is None else self.cap
        decision = decide(self.configured, self.spare, reading, current, self._proposed)
        self._proposed = decision.target
        if self.cap is None or decision.cap != self.cap:
            self.set_cap(decision.cap, decision.reason)
            self.cap = decision.cap
        self._watch_zero(decision)
        self.on_read(decision.cap)
        return decision

    def _watch_zero(self, decision: Decision) -> None:
        now = self.clock()
        if decision.cap > 0:
            self._zero_since = None
            if self._blocked:
                self._blocked = False
                self.blocked(None)
            return
        if self._zero_since is None:
            self._zero_since = now
        elif not self._blocked and now - self._zero_since >= ZERO_CAP_PERIODS * self.every_s:
            self._blocked = True
            self.blocked(f"no plan thread usable for {now - self._zero_since:.0f} s: {decision.reason}")

    def period(self) -> float:
        return self.every_s / 2 if self.cap is not None and self.cap < self.configured else self.every_s

    def run(self) -> None:
        poked = self.signals.last_poke()
        while not self._stop.is_set():
            due = self.clock() + self.period()
            while not self._stop.is_set() and self.clock() < due and self.signals.last_poke() == poked:
                self._stop.wait(min(0.1, self.every_s / 10, max(0.0, due - self.clock())))
            if self._stop.is_set():
                return
            if self.signals.last_poke() != poked:
                poked = self.signals.last_poke()
                self._proposed = None  # a refusal says the last reading was too generous
            with forksafe.guard:  # a reading talks HTTP and logs: no fork in the middle of it
                if self._stop.is_set():
                    return  # stopped while waiting for the guard: by a thread that holds it
                try:
                    self.read()
                except Exception:  # the scheduler did not answer: keep following, next period
                    log.exception("cap: could not apply the plan's reading; trying again next period")

    def start(self, seen: tuple[int, int] | None = None) -> None:
        with forksafe.guard:
            self.read(seen)
        self._thread = threading.Thread(target=self.run, name="plan-governor", daemon=True)
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """Stop reading; `wait=False` from a thread that holds `forksafe.guard` (the reader waits for it)."""
        self._stop.set()
        if wait and self._thread is not None:
            self._thread.join(timeout=10)
